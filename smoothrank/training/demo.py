"""The demo: train several losses on the bundled MQ2008 Fold1 and print a LETOR 4.0 leaderboard.

Each loss trains the same small MLP with the same seed, data pipeline and budget; the epoch is
selected on the validation split (S4) by NDCG@10 and scored once on the test split (S5) under
the official LETOR 4.0 convention (``Eval-Score-4.0.pl``: gain 2^l - 1, discount 1 at ranks 1
and 2 then 1/log2(r), NDCG@k of a list shorter than k counts as 0, a query without relevant
documents scores 0). The leaderboard prints the published LETOR 4.0 baselines of the same folds'
test sets (their mean for several folds), so that the rows compare like with like.
"""

from __future__ import annotations

import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from smoothrank.published import CONVENTION, PER_FOLD_SOURCE, baselines_for_folds
from smoothrank.training.config import Config, config_from_dict

__all__ = ["DEFAULT_LOSSES", "LEADERBOARD_METRICS", "demo_config", "format_leaderboard", "run_demo"]

DEFAULT_LOSSES = ("neural_ndcg", "lambda_rank", "list_net", "soft_ndcg")
LEADERBOARD_METRICS = ("ndcg@1", "ndcg@3", "ndcg@5", "ndcg@10", "p@1", "map")
LABELS = {"neural_ndcg": "NeuralNDCG", "lambda_rank": "LambdaRank", "list_net": "ListNet",
          "soft_ndcg": "SoftNDCG", "approx_ndcg": "ApproxNDCG", "rank_net": "RankNet",
          "list_mle": "ListMLE", "neural_ndcg_transposed": "NeuralNDCG-T", "rmse": "RMSE"}


def demo_config(loss: str, *, epochs: int = 15, seed: int = 0, run_dir: str = "runs/demo") -> Config:
    """The demo's training configuration for one loss (an MLP on MQ2008 Fold1)."""
    return config_from_dict({
        "seed": seed,
        "data": {"mq2008_fold": 1},
        "model": {"kind": "mlp", "hidden": [64, 32], "activation": "relu", "dropout": 0.2},
        "loss": {"name": loss},
        "optimizer": {"name": "adam", "lr": 2e-3},
        "training": {"epochs": epochs, "batch_size": 32, "list_size": 128, "grad_clip": 5.0},
        "evaluation": {"metrics": list(LEADERBOARD_METRICS), "select_by": "ndcg@10",
                       "convention": CONVENTION},
        "output": {"run_dir": run_dir},
    }, source="demo")


def _fold_text(folds: Sequence[int]) -> str:
    return f"Fold{folds[0]}" if len(folds) == 1 else ("5-fold" if sorted(folds) == [1, 2, 3, 4, 5]
                                                      else "Folds " + ",".join(map(str, folds)))


def format_leaderboard(results: dict[str, dict[str, float]], *, folds: Sequence[int] = (1,)) -> str:
    """The leaderboard text: this run's test metrics beside the published rows of the same folds."""
    where = _fold_text(folds)
    published = baselines_for_folds(folds)
    names = [f"{name} (ours, {where})" for name in results]
    names += [f"{name} (LETOR 4.0, {where})" for name in published]
    width = max(len(name) for name in names) + 2
    header = f"{'method':<{width}}" + "".join(f"{name.upper():>9}" for name in LEADERBOARD_METRICS)
    rule = "-" * len(header)
    lines = [
        f"MQ2008 test metrics, convention {CONVENTION!r} (official Eval-Score-4.0.pl: gain 2^l-1,",
        "discount 1 at ranks 1-2 then 1/log2(r); NDCG@k of a list shorter than k counts 0;",
        "a query with no relevant document scores 0)",
        rule, header, rule,
    ]
    for name, values in sorted(results.items(), key=lambda item: -item[1].get("ndcg@10", 0.0)):
        lines.append(_row(f"{name} (ours, {where})", values, width))
    lines.append(rule)
    for name, values in published.items():
        lines.append(_row(f"{name} (LETOR 4.0, {where})", values, width))
    lines += [rule, f"published: {PER_FOLD_SOURCE};",
              "the rows of the same test folds as this run"
              + ("." if len(set(folds)) == 5 else " (P@1 is published only as the five-fold average).")]
    if len(folds) == 1:
        lines.append(f"This run: Fold{folds[0]} (model selection on its validation split by NDCG@10, "
                     "scored on its test split),")
        lines.append("beside the published rows of the same test fold: folds differ more than methods do "
                     "(NDCG@1 0.30-0.44 for one method),")
        lines.append("so only same-fold rows compare; --folds 1-5 gives the five-fold average.")
    else:
        lines.append(f"This run: the mean over {where} of each fold's test metrics (model selection on "
                     "each fold's validation split by NDCG@10), averaged like the published rows.")
    return "\n".join(lines)


def _row(name: str, values: dict[str, float], width: int) -> str:
    cells = "".join(f"{values[m]:>9.4f}" if m in values else f"{'-':>9}" for m in LEADERBOARD_METRICS)
    return f"{name:<{width}}" + cells


def run_demo(*, losses: Sequence[str] | None = None, epochs: int = 15, seed: int = 0,
             folds: Sequence[int] = (1,), run_root: str | Path | None = None, quiet: bool = False,
             stream: TextIO | None = None, splits: dict[str, Any] | None = None
             ) -> dict[str, dict[str, float]]:
    """Train each loss on MQ2008 ``folds`` and print the leaderboard; returns {label: mean test metrics}.

    ``splits`` (``{"train", "valid", "test"}`` datasets) replaces the bundled data (one fold).
    """
    from smoothrank import losses as registry
    from smoothrank.errors import ConfigError
    from smoothrank.training.trainer import train

    stream = stream if stream is not None else sys.stdout
    available = set(registry.available())
    chosen = [name for name in (losses or DEFAULT_LOSSES) if losses or name in available]
    missing = [name for name in chosen if name not in available]
    if missing:
        raise ConfigError(f"--losses: unknown loss(es) {missing}; available: {sorted(available)}")
    folds = list(folds) if splits is None else [1]
    if not folds or any(f not in (1, 2, 3, 4, 5) for f in folds) or len(set(folds)) != len(folds):
        raise ConfigError(f"--folds: expected distinct folds among 1..5, got {folds}")
    if run_root is not None:
        _refuse_finished_runs(Path(run_root), chosen, folds)
    progress = _DemoProgress(quiet, epochs)
    per_fold: dict[str, list[dict[str, float]]] = {}
    total = len(chosen) * len(folds)
    with tempfile.TemporaryDirectory(prefix="smoothrank-demo-") as tmp:
        root = Path(run_root) if run_root is not None else Path(tmp)
        for fold_index, fold in enumerate(folds):
            data = splits if splits is not None else _load_fold(fold)
            for index, loss in enumerate(chosen):
                label = LABELS.get(loss, loss)
                started = time.perf_counter()
                config = demo_config(loss, epochs=epochs, seed=seed, run_dir=str(_run_dir(root, fold, loss)))
                progress.start(f"[{fold_index * len(chosen) + index + 1}/{total}] Fold{fold} {label}")
                result = train(config, quiet=True, splits=data, on_epoch=progress.epoch)
                # The convention goes with every number printed (PITFALLS 10).
                progress.finish(f"best epoch {result.best_epoch} "
                                f"(validation NDCG@10 {result.best_value:.4f}), "
                                f"test NDCG@10 {result.test_metrics['ndcg@10']:.4f} "
                                f"[{CONVENTION} convention], "
                                f"{time.perf_counter() - started:.0f} s")
                per_fold.setdefault(label, []).append(result.test_metrics)
    results = {label: {m: sum(r[m] for r in runs) / len(runs) for m in runs[0]}
               for label, runs in per_fold.items()}
    print(format_leaderboard(results, folds=folds), file=stream)
    return results


def _run_dir(root: Path, fold: int, loss: str) -> Path:
    return root / f"fold{fold}" / loss


def _refuse_finished_runs(root: Path, losses: Sequence[str], folds: Sequence[int]) -> None:
    """Refuse a run root that already holds a run the demo would write, before any training."""
    from smoothrank.errors import ConfigError
    from smoothrank.training.checkpoint import CHECKPOINT

    taken = [f"fold{fold}/{loss}" for fold in folds for loss in losses
             if (_run_dir(root, fold, loss) / CHECKPOINT).exists()]
    if taken:
        raise ConfigError(f"--run-dir: {root} already holds demo runs ({', '.join(taken)}); "
                          "choose another --run-dir or delete it")


def _load_fold(fold: int) -> dict[str, Any]:
    from smoothrank.datasets import load_mq2008

    return {name: load_mq2008(fold=fold, split=split)
            for name, split in (("train", "train"), ("valid", "vali"), ("test", "test"))}


class _DemoProgress:
    """Progress on stderr: a tqdm bar per loss on a terminal, one line per loss otherwise."""

    def __init__(self, quiet: bool, epochs: int) -> None:
        self.quiet, self.epochs, self.bar, self.name = quiet, epochs, None, ""
        self.tty = sys.stderr.isatty()

    def start(self, name: str) -> None:
        self.name = name
        if self.quiet:
            return
        if self.tty:
            from tqdm import tqdm

            self.bar = tqdm(total=self.epochs, desc=name, unit="epoch", file=sys.stderr, leave=True)
        else:
            print(f"{name}: training {self.epochs} epochs ...", file=sys.stderr, flush=True)

    def epoch(self, row: dict[str, Any]) -> None:
        if self.bar is not None:
            self.bar.set_postfix(loss=f"{row['loss']:.4f}",
                                 valid_ndcg10=f"{row.get('valid_ndcg@10', 0.0):.4f}")
            self.bar.update(1)

    def finish(self, text: str) -> None:
        if self.quiet:
            return
        if self.bar is not None:
            self.bar.set_postfix_str(text)
            self.bar.close()
            self.bar = None
        else:
            print(f"{self.name}: {text}", file=sys.stderr, flush=True)

