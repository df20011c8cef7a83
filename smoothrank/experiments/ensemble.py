"""Seed ensembles and blends: per fold, the scores of several runs combined per query and evaluated.

With ``ensemble: true`` in a spec, every method (neural or GBDT) trained with N >= 2 seeds gets
one more "method", ``<method>+ens<N>``: on each fold, the N runs' scores of every document are
normalised per query (:func:`normalize_scores`; standardised by default, ``ensemble_normalize``),
averaged over the runs
(:func:`combine_scores`), and the averaged scores are evaluated like any run's (training,
validation and test splits under the spec's convention; per-query test values for the t-test).
No training is involved, so an ensemble is rebuilt whenever one of its members changes.

A *blend* (``blends:`` in a spec) combines different methods the same way: its label names it, its
members are method labels of the grid, and every member method weighs the same in the mean (a
method's seed runs share its weight), so a method run with five seeds does not outvote one run
with a single seed.

Storage (see :func:`build_ensemble`)::

    OUT/runs/<run id>/scores.npz               every run's scores: float64 arrays train/valid/test,
                                               dataset row order
    OUT/ensembles/<ensemble id>/result.json    a run's result schema, kind "ensemble", the members
    OUT/ensembles/<ensemble id>/scores.npz     the combined scores

The ensemble id is ``<dataset>--fold<k>--<method>+ens<N>`` (``files`` for a file dataset).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from smoothrank.errors import SmoothrankError
from smoothrank.experiments import stacking
from smoothrank.experiments.combine import NORMALIZATIONS, combine_scores, normalize_scores
from smoothrank.experiments.results import (
    RESULT_FILE,
    SCORES_FILE,
    read_scores,
    score_splits,
    write_json,
    write_scores,
)
from smoothrank.experiments.spec import Cell, ExperimentSpec, LearnerSpec

__all__ = ["ENSEMBLES_DIR", "NORMALIZATIONS", "SCORES_FILE", "EnsemblePlan", "build_ensemble",
           "combine_scores", "ensemble_label", "ensemble_state", "member_scores", "normalize_scores",
           "plan_ensembles", "read_scores", "write_scores"]

ENSEMBLES_DIR = "ensembles"
# Bumped when the combination changes, so stored ensembles are rebuilt.
_FORMULA_VERSION = 1


# ------------------------------------------------------------------------------ planning
def ensemble_label(method: str, n_seeds: int) -> str:
    """``<method>+ens<N>``, the method label of the seed ensemble of ``method``."""
    return f"{method}+ens{n_seeds}"


@dataclass(frozen=True)
class EnsemblePlan:
    """One ensemble on one dataset fold: a method's seed runs (in the spec's seed order) or a blend's
    runs (member method by member method; ``weights`` give each method the same share)."""

    dataset: str
    fold: int | None
    method: str
    label: str
    normalize: str
    members: tuple[Cell, ...]
    weights: tuple[float, ...] | None = None
    blend_of: tuple[str, ...] = ()
    # A ``weights: learned`` blend: its learner settings (loss, options, l2, cv); ``weights`` are
    # then the equal starting shares, replaced by the weights fit on validation.
    learner: Mapping[str, Any] | None = None

    @property
    def ensemble_id(self) -> str:
        fold = f"fold{self.fold}" if self.fold is not None else "files"
        return f"{self.dataset}--{fold}--{self.label}"


def plan_ensembles(spec: ExperimentSpec, cells: Sequence[Cell]) -> list[EnsemblePlan]:
    """The ensembles of ``spec``: the seed ensembles (with ``ensemble: true``) in the order of
    ``cells``, then the blends of every dataset fold."""
    groups: dict[tuple[str, int | None, str], list[Cell]] = {}
    for cell in cells:
        groups.setdefault((cell.dataset, cell.fold, cell.method), []).append(cell)
    plans = [EnsemblePlan(dataset, fold, method, ensemble_label(method, len(members)),
                          spec.ensemble_normalize, tuple(members))
             for (dataset, fold, method), members in groups.items() if spec.ensemble and len(members) >= 2]
    folds = list(dict.fromkeys((dataset, fold) for dataset, fold, _ in groups))
    for blend in spec.blends:
        for dataset, fold in folds:
            runs = [groups.get((dataset, fold, method), []) for method in blend.members]
            if not all(runs):
                continue  # a member method absent from this dataset fold
            members = tuple(c for method_runs in runs for c in method_runs)
            weights = tuple(1.0 / (len(runs) * len(method_runs)) for method_runs in runs for _ in method_runs)
            learner = (blend.learner or LearnerSpec()).model_dump() if blend.weights == "learned" else None
            plans.append(EnsemblePlan(dataset, fold, "+".join(blend.members), blend.label,
                                      blend.normalize or spec.ensemble_normalize, members, weights,
                                      tuple(blend.members), learner))
    return plans


# ------------------------------------------------------------------------------ scores of the members
def _rescore_neural(cell: Cell, run_dir: Path, splits: Mapping[str, Any],
                    result: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Scores of a finished neural run without ``scores.npz``, from its saved model (then checked)."""
    from smoothrank.training import load_model

    model_path = run_dir / "train" / "model.pt"
    if not model_path.is_file():
        raise SmoothrankError(f"{run_dir}: finished run without {SCORES_FILE} nor train/model.pt; "
                              "delete it to redo the run")
    model = load_model(model_path)
    scores = {name: model.score(ds) for name, ds in splits.items()}
    if cell.settings.get("refit"):
        # A refit run's training and test scores are the refit model's; validation stays the selected one's.
        refit_path = run_dir / "refit" / "model.pt"
        if not refit_path.is_file():
            raise SmoothrankError(f"{run_dir}: finished refit run without {SCORES_FILE} nor refit/model.pt; "
                                  "delete it to redo the run")
        refitted = load_model(refit_path)
        scores.update({name: refitted.score(splits[name]) for name in ("train", "test") if name in splits})
    check = score_splits({"test": scores["test"]}, {"test": splits["test"]},
                          metrics=cell.settings["metrics"], convention=cell.settings["convention"])
    for metric, value in check["metrics"]["test"].items():
        stored = (result.get("metrics", {}).get("test") or {}).get(metric)
        if stored is not None and not abs(stored - value) <= 1e-9:
            raise SmoothrankError(f"{run_dir}: its saved model no longer reproduces its test {metric} "
                                  f"({value} vs {stored}); delete it to redo the run")
    return scores


def member_scores(cell: Cell, out_dir: str | Path, splits: Mapping[str, Any],
                  result: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The per-split scores of a finished run.

    Read from ``OUT/runs/<run id>/scores.npz``. A finished run without that file: a neural run is
    re-scored from its saved model (``train/model.pt``), checked against its stored test metrics, and
    the scores are saved; a GBDT run keeps no model, so that is an error asking to delete the run
    folder (the next invocation redoes the run).
    """
    run_dir = Path(out_dir) / "runs" / cell.run_id
    path = run_dir / SCORES_FILE
    if path.is_file():
        scores = read_scores(path)
    elif cell.kind == "neural":
        scores = _rescore_neural(cell, run_dir, splits, result)
        write_scores(path, scores)
    else:
        raise SmoothrankError(f"{run_dir}: this run finished before runs kept their scores ({SCORES_FILE}) "
                              "and a GBDT run keeps no model to re-score; delete it to redo the run")
    for name, ds in splits.items():
        if name not in scores or scores[name].shape != (ds.n_docs,):
            got = scores[name].shape if name in scores else "none"
            raise SmoothrankError(f"{path}: expected {ds.n_docs} {name} scores, got {got}; "
                                  "delete the run folder to redo the run")
        if not np.isfinite(scores[name]).all():
            raise SmoothrankError(f"{path}: {int((~np.isfinite(scores[name])).sum())} non-finite {name} "
                                  "score(s); delete the run folder to redo the run")
    return scores


def _digest(scores: Mapping[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for name in sorted(scores):
        h.update(name.encode() + b"\0" + np.ascontiguousarray(scores[name], dtype="<f8").tobytes())
    return h.hexdigest()


def _data_section(cell: Cell) -> dict[str, Any]:
    return cell.settings["config"]["data"] if cell.kind == "neural" else cell.settings["data"]


def _learned_blend(plan: EnsemblePlan, members: Sequence[Mapping[str, np.ndarray]],
                   splits: Mapping[str, Any]) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The scores of a ``weights: learned`` blend on every split, and what was learned.

    Weights fit on the whole validation split score the training and test splits; the validation
    split itself is cross-fitted (:mod:`smoothrank.experiments.stacking`).
    """
    if splits.get("valid") is None:
        raise SmoothrankError(f"{plan.ensemble_id}: a learned blend fits its weights on the validation "
                              "split, and this dataset has none")
    learner = plan.learner or {}
    fit_options = {"loss": learner["loss"], "options": learner["options"], "l2": learner["l2"]}
    by_method = [[i for i, c in enumerate(plan.members) if c.method == method] for method in plan.blend_of]

    def features(split: str) -> np.ndarray:
        runs = [[members[i][split] for i in idx] for idx in by_method]
        return stacking.blend_features(runs, splits[split].offsets, normalize=plan.normalize)

    valid = splits["valid"]
    x_valid = features("valid")
    fit = stacking.fit_blend(x_valid, valid.labels, valid.offsets, **fit_options)
    combined = {name: features(name) @ fit.weights for name in splits if name != "valid"}
    combined["valid"], part_fits = stacking.cross_fit_blend(x_valid, valid.labels, valid.offsets,
                                                            cv=learner["cv"], **fit_options)
    learned = {"learner": dict(learner),
               "learned_weights": {m: float(w) for m, w in zip(plan.blend_of, fit.weights, strict=True)},
               "cross_fit_weights": [[float(w) for w in f.weights] for f in part_fits],
               "fit": fit.summary(), "cross_fits": [f.summary() for f in part_fits]}
    return combined, learned


def ensemble_state(plan: EnsemblePlan, out_dir: str | Path, finished: set[str], *, convention: str) -> str:
    """What running the experiment would do with one ensemble (``--dry-run``): ``"to build (after k
    of its N member runs)"`` while members are unfinished, else ``"built"`` if the stored ensemble was
    made from the members' current settings (as :func:`build_ensemble` would reuse it; the members'
    scores are not read), ``"to rebuild (...)"`` or ``"to build"``."""
    waiting = sum(c.run_id not in finished for c in plan.members)
    if waiting:
        return f"to build (after {waiting} of its {len(plan.members)} member runs)"
    try:
        result = json.loads((Path(out_dir) / ENSEMBLES_DIR / plan.ensemble_id / RESULT_FILE)
                            .read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "to build"
    if not isinstance(result, dict) or not isinstance(result.get("ensemble"), dict):
        return "to build"
    stored = result["ensemble"]
    same = (result.get("method") == plan.label and result.get("convention") == convention
            and stored.get("normalize") == plan.normalize
            and stored.get("members") == [c.run_id for c in plan.members]
            and stored.get("member_fingerprints") == [c.fingerprint() for c in plan.members]
            and stored.get("weights") == (list(plan.weights) if plan.weights is not None else None)
            and stored.get("learner") == (dict(plan.learner) if plan.learner is not None else None))
    return "built" if same else "to rebuild (its settings or members changed)"


def build_ensemble(plan: EnsemblePlan, out_dir: str | Path, results: Mapping[str, Mapping[str, Any]], *,
                   metrics: Sequence[str], convention: str,
                   split_cache: dict[str, dict[str, Any]] | None = None) -> tuple[dict[str, Any], bool]:
    """Build (or reuse) one ensemble; return ``(result, built_now)``.

    ``results`` maps run ids to the finished members' results. The ensemble's fingerprint hashes
    its label, normalisation, metrics, convention and each member's run id, fingerprint and scores:
    a stored ensemble with the same fingerprint is reused, any other is rebuilt (cheap: no training).
    """
    from smoothrank.datasets import load_splits

    started = time.perf_counter()
    cache = split_cache if split_cache is not None else {}
    key = json.dumps(_data_section(plan.members[0]), sort_keys=True)
    if key not in cache:
        cache[key] = load_splits(_data_section(plan.members[0]))
    splits = cache[key]
    members = [member_scores(c, out_dir, splits, results[c.run_id]) for c in plan.members]
    identity: dict[str, Any] = {
        "formula": _FORMULA_VERSION, "label": plan.label, "normalize": plan.normalize,
        "metrics": list(metrics), "convention": convention,
        "members": [[c.run_id, c.fingerprint(), _digest(s)]
                    for c, s in zip(plan.members, members, strict=True)],
    }
    if plan.weights is not None:  # absent for seed ensembles: an identity holds only what is set
        identity["weights"] = list(plan.weights)
    if plan.learner is not None:  # absent for equal-weight blends, likewise
        identity["learner"] = dict(plan.learner)
    fingerprint = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
    folder = Path(out_dir) / ENSEMBLES_DIR / plan.ensemble_id
    path = folder / RESULT_FILE
    if path.is_file():
        try:
            stored = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            stored = None  # rebuilt below
        if isinstance(stored, dict) and stored.get("fingerprint") == fingerprint:
            return stored, False
    if plan.learner is None:
        combined = {name: combine_scores([m[name] for m in members], ds.offsets, normalize=plan.normalize,
                                         weights=plan.weights)
                    for name, ds in splits.items()}
        learned: dict[str, Any] = {}
    else:
        combined, learned = _learned_blend(plan, members, splits)
    scored = score_splits(combined, splits, metrics=metrics, convention=convention)
    result = {"run_id": plan.ensemble_id, "dataset": plan.dataset, "fold": plan.fold, "method": plan.label,
              "kind": "ensemble", "seed": None, "fingerprint": fingerprint, "convention": convention,
              "seconds": round(time.perf_counter() - started, 3), **scored,
              "ensemble": {"of": list(plan.blend_of) if plan.blend_of else plan.method,
                           "normalize": plan.normalize,
                           "members": [c.run_id for c in plan.members],
                           "member_fingerprints": [c.fingerprint() for c in plan.members],
                           **({"weights": list(plan.weights)} if plan.weights is not None else {}),
                           **learned}}
    folder.mkdir(parents=True, exist_ok=True)
    write_scores(folder / SCORES_FILE, combined)
    write_json(path, result)  # last: the ensemble is finished iff it exists
    return result, True
