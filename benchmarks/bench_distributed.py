"""Benchmark: ``smoothrank train`` in one process and in two (torchrun, gloo on the CPU), and the
boosting objectives on a two-worker Dask cluster.

Usage::

    OMP_WAIT_POLICY=PASSIVE .venv/bin/python benchmarks/bench_distributed.py             # every part
    .venv/bin/python benchmarks/bench_distributed.py --parts epoch --datasets mq2008 --reps 3

Parts (``--parts``, comma-separated):

* ``epoch``: one training epoch (``training.epochs=1``) of an MLP [64, 32] with NeuralNDCG, 64 lists
  of 240 a step, on MQ2008 Fold1 (bundled) and on synthetic MSLR-like data (136 features, queries
  of 60-180 documents, ``smoothrank.datasets.write_synthetic_letor``), as one process with 2
  threads, one process with 1 thread, and two processes (torchrun) with 1 thread each. The figure
  is the epoch's ``seconds`` in ``metrics.jsonl`` (training and validation; process start and data
  loading excluded), median of ``--reps`` runs, with the range.
* ``parity``: MQ2008 Fold1, ``--parity-epochs`` epochs of the same model without dropout, one
  process against two: the selected epoch and the validation and test NDCG@10 (the issue's check:
  the same epoch, the metrics within 2e-3).
* ``dask``: MQ2008 Fold1's raw features, LightGBM (``DaskLGBMRanker``) and XGBoost
  (``xgboost.dask.train``) with ``lambda_rank``, ``list_net`` and ``neural_ndcg``, 30 rounds: test
  NDCG@10 on one machine and on a two-process ``LocalCluster`` (partitions of whole queries).

The load average (``uptime``) is printed with the tables: the machine may be shared.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml
from _args import positive_int

REPO = Path(__file__).resolve().parent.parent
PARTS = ("epoch", "parity", "dask")
DATASETS = ("mq2008", "synthetic")
LOSSES = ("lambda_rank", "list_net", "neural_ndcg")


def _config(data: dict, *, epochs: int, dropout: float) -> dict:
    return {
        "seed": 0, "data": data,
        "model": {"kind": "mlp", "hidden": [64, 32], "dropout": dropout},
        "loss": {"name": "neural_ndcg"}, "optimizer": {"lr": 0.001},
        "training": {"epochs": epochs, "batch_size": 64, "list_size": 240},
        "evaluation": {"metrics": ["ndcg@10"], "select_by": "ndcg@10"},
        "output": {"run_dir": "runs/unused"},
    }


def _train(config: Path, run_dir: Path, *, processes: int, threads: int, timeout: float) -> dict:
    """``smoothrank train`` (under torchrun for 2+ processes); the run's summary and log. The data
    store (``SMOOTHRANK_CACHE``) lies in the work folder: every process memory-maps one copy."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": str(threads), "SMOOTHRANK_CACHE": str(run_dir.parent / "store")}
    train = ["-m", "smoothrank", "train", str(config), f"training.num_threads={threads}", "--run-dir",
             str(run_dir), "--quiet"]
    if processes > 1:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   f"--nproc_per_node={processes}", *train]
    else:
        command = [sys.executable, *train]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    log = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {"summary": json.loads((run_dir / "summary.json").read_text()), "log": log}


def _datasets(names: list[str], work: Path, queries: int) -> dict[str, dict]:
    data = {}
    if "mq2008" in names:
        data["mq2008"] = {"mq2008_fold": 1}
    if "synthetic" in names:
        from smoothrank.datasets.synthetic import write_synthetic_letor

        paths = {}
        for split, n, seed in (("train", queries, 0), ("valid", max(1, queries // 5), 1),
                               ("test", max(1, queries // 5), 2)):
            paths[split] = str(write_synthetic_letor(work / f"synthetic_{split}.txt", n, (60, 180), 136,
                                                     seed=seed))
        data["synthetic"] = paths
    return data


def epoch_part(args: argparse.Namespace, work: Path) -> None:
    settings = [(1, 2), (1, 1), (2, 1)]  # (processes, threads each)
    print("\n| data | processes x threads | epoch (s), median | range (s) | runs |")
    print("|---|---|---|---|---|")
    for name, data in _datasets(args.datasets, work, args.synthetic_queries).items():
        config = work / f"{name}_epoch.yaml"
        config.write_text(yaml.safe_dump(_config(data, epochs=1, dropout=0.1)))
        seconds: dict[tuple[int, int], list[float]] = {s: [] for s in settings}
        for rep in range(args.reps):  # the settings alternate, so that a load spike hits them alike
            for processes, threads in settings:
                run = work / f"{name}_{processes}x{threads}_{rep}"
                result = _train(config, run, processes=processes, threads=threads, timeout=args.timeout)
                seconds[(processes, threads)].append(result["log"][0]["seconds"])
        for (processes, threads), values in seconds.items():
            print(f"| {name} | {processes} x {threads} | {statistics.median(values):.2f} | "
                  f"{min(values):.2f}-{max(values):.2f} | {len(values)} |")


def parity_part(args: argparse.Namespace, work: Path) -> None:
    config = work / "parity.yaml"
    config.write_text(yaml.safe_dump(_config({"mq2008_fold": 1}, epochs=args.parity_epochs, dropout=0.0)))
    print(f"\n| MQ2008 Fold1, {args.parity_epochs} epochs | selected epoch | valid NDCG@10 | test NDCG@10 |")
    print("|---|---|---|---|")
    rows = {}
    for processes, threads in ((1, 2), (2, 1)):
        summary = _train(config, work / f"parity_{processes}", processes=processes, threads=threads,
                         timeout=args.timeout)["summary"]
        rows[processes] = summary
        print(f"| {processes} process(es) | {summary['best_epoch']} | {summary['valid']['ndcg@10']:.6f} | "
              f"{summary['test']['ndcg@10']:.6f} |")
    one, two = rows[1], rows[2]
    same = one["best_epoch"] == two["best_epoch"]
    gaps = [abs(one[s]["ndcg@10"] - two[s]["ndcg@10"]) for s in ("valid", "test")]
    verdict = "PASS" if same and max(gaps) <= 2e-3 else "FAIL"
    print(f"\nsame epoch: {same}; |valid gap| {gaps[0]:.2e}, |test gap| {gaps[1]:.2e} (target 2e-3): "
          f"{verdict}")


def dask_part(args: argparse.Namespace) -> None:
    import lightgbm as lgb
    import numpy as np
    import xgboost as xgb
    import xgboost.dask
    from distributed import Client, LocalCluster, wait

    from smoothrank.boosting import lgbm_ranker_objective, xgboost_objective
    from smoothrank.datasets import load_mq2008
    from smoothrank.distributed.dask import partition_by_query
    from smoothrank.metrics import evaluate_flat

    train, test = load_mq2008(1, "train"), load_mq2008(1, "test")
    x, y, qid = train.features, train.labels.astype(np.float64), train.query_of_row()

    def ndcg(scores: np.ndarray) -> float:
        return float(evaluate_flat(scores, test.labels, offsets=test.offsets,
                                   metrics=["ndcg@10"])["ndcg@10"].mean())

    trees = {"n_estimators": args.rounds, "learning_rate": 0.1, "num_leaves": 15, "min_child_samples": 10,
             "verbosity": -1, "deterministic": True, "random_state": 0}
    xgb_params = {"max_depth": 4, "eta": 0.1, "base_score": 0.0, "seed": 0, "nthread": 1}
    print(f"\n| MQ2008 Fold1, {args.rounds} rounds | loss | one machine | 2 Dask workers | difference |")
    print("|---|---|---|---|---|")
    with LocalCluster(n_workers=2, threads_per_worker=1, host="127.0.0.1", dashboard_address=None,
                      worker_dashboard_address=None) as cluster, Client(cluster) as client:
        parts = partition_by_query(x, y, qid, npartitions=2)
        features, labels, qids, group = client.persist([parts.features, parts.labels, parts.qid, parts.group])
        wait([features, labels, qids, group])
        for loss in args.losses:
            single = lgb.LGBMRanker(objective=lgbm_ranker_objective(loss), **trees).fit(x, y,
                                                                                        group=np.bincount(qid))
            ranker = lgb.DaskLGBMRanker(client=client, objective=lgbm_ranker_objective(loss), **trees)
            ranker.fit(features, labels, group=group)
            a, b = ndcg(single.predict(test.features)), ndcg(ranker.to_local().predict(test.features))
            print(f"| LightGBM | {loss} | {a:.4f} | {b:.4f} | {b - a:+.4f} |")
            booster = xgb.train(xgb_params, xgb.DMatrix(x, y, qid=qid), args.rounds,
                                obj=xgboost_objective(loss))
            dtrain = xgb.dask.DaskDMatrix(client, features, labels, qid=qids)
            on_dask = xgb.dask.train(client, xgb_params, dtrain, args.rounds, obj=xgboost_objective(loss))
            a = ndcg(booster.predict(xgb.DMatrix(test.features)))
            b = ndcg(on_dask["booster"].predict(xgb.DMatrix(test.features)))
            print(f"| XGBoost | {loss} | {a:.4f} | {b:.4f} | {b - a:+.4f} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)}")
    parser.add_argument("--datasets", default=",".join(DATASETS), help="epoch part: mq2008, synthetic")
    parser.add_argument("--reps", type=positive_int, default=3, help="epoch part: runs of each setting")
    parser.add_argument("--synthetic-queries", type=positive_int, default=1000,
                        help="training queries of the synthetic data (a fifth as many valid and test)")
    parser.add_argument("--parity-epochs", type=positive_int, default=20)
    parser.add_argument("--rounds", type=positive_int, default=30, help="dask part: boosting rounds")
    parser.add_argument("--losses", default=",".join(LOSSES), help="dask part: comma-separated losses")
    parser.add_argument("--timeout", type=positive_int, default=1800,
                        help="seconds a training command may take")
    args = parser.parse_args(argv)
    parts = [p for p in args.parts.split(",") if p]
    args.datasets = [d for d in args.datasets.split(",") if d]
    args.losses = [name for name in args.losses.split(",") if name]
    for value, allowed, flag in ((parts, PARTS, "--parts"), (args.datasets, DATASETS, "--datasets")):
        unknown = sorted(set(value) - set(allowed))
        if unknown:
            parser.error(f"{flag}: unknown {unknown}; expected some of {', '.join(allowed)}")
    print(f"load average: {os.getloadavg()}; {os.cpu_count()} CPUs; CPU only (gloo)")
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        if "epoch" in parts:
            epoch_part(args, work)
        if "parity" in parts:
            parity_part(args, work)
        if "dask" in parts:
            dask_part(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
