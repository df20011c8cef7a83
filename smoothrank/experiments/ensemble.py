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
import zipfile
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from smoothrank._atomic import atomic_writer
from smoothrank.errors import SmoothrankError
from smoothrank.experiments import stacking
from smoothrank.experiments.spec import Cell, ExperimentSpec, LearnerSpec

__all__ = ["ENSEMBLES_DIR", "NORMALIZATIONS", "SCORES_FILE", "EnsemblePlan", "build_ensemble",
           "combine_scores", "ensemble_label", "ensemble_state", "member_scores", "normalize_scores",
           "plan_ensembles", "read_scores", "write_scores"]

NORMALIZATIONS = ("zscore", "rank", "none")
SCORES_FILE = "scores.npz"
ENSEMBLES_DIR = "ensembles"
# A query whose scores spread less than this fraction of their magnitude is constant up to rounding
# (float32 model outputs differ by >= 2**-24 ~ 6e-8 of their magnitude, far above it).
_CONSTANT_RTOL = 1e-10
# Bumped when the combination changes, so stored ensembles are rebuilt.
_FORMULA_VERSION = 1


# ------------------------------------------------------------------------------ the maths
def _check_offsets(offsets: Any, n_docs: int) -> np.ndarray:
    off = np.asarray(offsets)
    if off.ndim != 1 or off.size < 1 or not np.issubdtype(off.dtype, np.integer):
        raise SmoothrankError(f"offsets: expected a 1-D integer array (n_queries + 1,), got dtype "
                              f"{off.dtype} and shape {off.shape}")
    off = off.astype(np.int64)
    if off[0] != 0 or off[-1] != n_docs or np.any(np.diff(off) < 0):
        raise SmoothrankError(f"offsets: expected non-decreasing values from 0 to the number of scores "
                              f"({n_docs}), got {off[0]} .. {off[-1]}")
    return off


def _query_index(off: np.ndarray) -> np.ndarray:
    return np.repeat(np.arange(off.size - 1), np.diff(off))


def normalize_scores(scores: Any, offsets: Any, *, normalize: str = "zscore") -> np.ndarray:
    """Standardise one run's scores within each query (float64, same shape).

    For a query q with scores :math:`s_1..s_n`:

    * ``"zscore"``: :math:`z_i = (s_i - \\bar s) / \\sigma` with the population standard deviation
      :math:`\\sigma = \\sqrt{\\tfrac1n \\sum_j (s_j - \\bar s)^2}`. The floor: when
      :math:`\\max_i |s_i - \\bar s| \\le 10^{-10} \\max_i |s_i|` (the scores are constant up to
      rounding; always for n = 1) every :math:`z_i = 0`: the run expresses no preference on q.
      The query is first divided by :math:`\\max_i |s_i|` (z is scale-invariant), so huge or
      tiny scores neither overflow nor underflow.
    * ``"rank"``: :math:`r_i = (R_i - 1) / (n - 1)` where :math:`R_i` is the 1-based ascending rank
      of :math:`s_i` in q, tied scores sharing their average rank; :math:`r_i \\in [0, 1]`, the
      highest score gets 1, a query of one document (or of ties only) gets 0.5.
    * ``"none"``: the raw scores.

    ``"zscore"`` and ``"rank"`` are invariant to a per-query shift and positive scaling of the
    scores, and both keep each query's order (ties included). Queries are the rows
    ``offsets[q]:offsets[q+1]`` (flat, no padding; an empty query is allowed).
    """
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 1:
        raise SmoothrankError(f"scores: expected a 1-D array of per-document scores, got shape {s.shape}")
    if not np.isfinite(s).all():
        raise SmoothrankError(f"scores: {int((~np.isfinite(s)).sum())} non-finite score(s)")
    off = _check_offsets(offsets, s.size)
    if normalize == "none":
        return s.copy()
    n_queries = off.size - 1
    qidx = _query_index(off)
    sizes = np.diff(off)
    if normalize == "zscore":
        magnitude = np.zeros(n_queries)
        np.maximum.at(magnitude, qidx, np.abs(s))
        u = s / np.where(magnitude > 0, magnitude, 1.0)[qidx]  # in [-1, 1] per query
        mean = np.bincount(qidx, weights=u, minlength=n_queries) / np.maximum(sizes, 1)
        centred = u - mean[qidx]
        spread = np.zeros(n_queries)
        np.maximum.at(spread, qidx, np.abs(centred))
        varying = spread > _CONSTANT_RTOL  # u has magnitude 1, so this is the relative floor
        c = centred / np.where(varying, spread, 1.0)[qidx]  # in [-1, 1]: its square cannot underflow to 0
        std = np.sqrt(np.bincount(qidx, weights=c * c, minlength=n_queries) / np.maximum(sizes, 1))
        return np.where(varying[qidx], c / np.where(varying, std, 1.0)[qidx], 0.0)
    if normalize == "rank":
        order = np.lexsort((s, qidx))  # by query, then ascending score
        sorted_s, sorted_q = s[order], qidx[order]
        position = np.arange(s.size) - off[sorted_q]  # 0-based position within its query
        new_group = np.ones(s.size, dtype=bool)
        new_group[1:] = (sorted_q[1:] != sorted_q[:-1]) | (sorted_s[1:] != sorted_s[:-1])
        group = np.cumsum(new_group) - 1
        mean_position = (np.bincount(group, weights=position) / np.bincount(group))[group]
        denominator = (sizes - 1)[sorted_q].astype(np.float64)
        out = np.empty(s.size)
        several = denominator > 0
        out[order] = np.where(several, mean_position / np.where(several, denominator, 1.0), 0.5)
        return out
    raise SmoothrankError(f"normalize: expected one of {list(NORMALIZATIONS)}, got {normalize!r}")


def combine_scores(score_arrays: Sequence[Any], offsets: Any, *, normalize: str = "zscore",
                   weights: Sequence[float] | None = None) -> np.ndarray:
    """The ensemble score of every document: the (weighted) mean of the runs' standardised scores.

    .. math:: e_i = \\sum_{m=1}^{M} w_m N_q(s^{(m)})_i, \\qquad w_m = 1/M \\text{ by default}

    where :math:`s^{(m)}` are the scores of run m (all runs score the same documents in the same
    row order), q the query of document i, and :math:`N_q` the per-query standardisation of
    :func:`normalize_scores` (``"zscore"``, ``"rank"`` or ``"none"``). Standardising first puts
    runs whose scores live on different scales on an equal footing (a run with 10x larger scores
    would otherwise dominate the mean); it is the score-level analogue of CombSUM over
    normalised scores (Fox and Shaw, "Combination of multiple searches", TREC-2, 1994).

    Parameters
    ----------
    score_arrays : sequence of 1-D arrays
        One array of per-document scores per run, each of length ``offsets[-1]``.
    offsets : 1-D integer array
        ``offsets[q]:offsets[q+1]`` are the rows of query q (flat, no padding).
    normalize : {"zscore", "rank", "none"}
    weights : sequence of float, optional
        One non-negative weight per run, not all zero; divided by their sum. Default: equal.

    Returns
    -------
    np.ndarray
        float64, shape ``(offsets[-1],)``.
    """
    if normalize not in NORMALIZATIONS:
        raise SmoothrankError(f"normalize: expected one of {list(NORMALIZATIONS)}, got {normalize!r}")
    if isinstance(score_arrays, np.ndarray) and score_arrays.ndim == 1:
        raise SmoothrankError("score_arrays: expected a sequence of per-run score arrays, got one 1-D array")
    arrays = [np.asarray(a, dtype=np.float64) for a in score_arrays]
    if not arrays:
        raise SmoothrankError("score_arrays: at least one run's scores are required")
    for m, a in enumerate(arrays):
        if a.shape != arrays[0].shape:
            raise SmoothrankError(f"score_arrays[{m}]: shape {a.shape} differs from score_arrays[0] "
                                  f"{arrays[0].shape}")
    w = None if weights is None else _check_weights(weights, len(arrays))
    total = np.zeros(arrays[0].shape, dtype=np.float64)
    for m, a in enumerate(arrays):
        try:
            z = normalize_scores(a, offsets, normalize=normalize)
        except SmoothrankError as err:
            raise SmoothrankError(f"score_arrays[{m}]: {err}") from None
        total += z if w is None else w[m] * z
    return total / len(arrays) if w is None else total


def _check_weights(weights: Sequence[float], n_runs: int) -> np.ndarray:
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != (n_runs,):
        raise SmoothrankError(f"weights: expected one weight per run ({n_runs}), got shape {w.shape}")
    if not np.isfinite(w).all() or (w < 0).any() or w.sum() <= 0:
        raise SmoothrankError(f"weights: expected finite non-negative weights, not all zero, "
                              f"got {w.tolist()}")
    return w / w.sum()


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


# ------------------------------------------------------------------------------ storage
def write_scores(path: str | Path, scores: Mapping[str, Any]) -> None:
    """Write ``{split: scores}`` as an ``.npz`` of float64 arrays, atomically."""
    arrays = {name: np.asarray(values, dtype=np.float64) for name, values in scores.items()}
    with atomic_writer(path) as handle:
        np.savez(handle, **arrays)


def read_scores(path: str | Path) -> dict[str, np.ndarray]:
    """Read a file written by :func:`write_scores`."""
    try:
        with np.load(path, allow_pickle=False) as data:
            return {name: np.asarray(data[name], dtype=np.float64) for name in data.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as err:  # damaged, truncated
        # The folder, not the file: a GBDT run keeps no model to recompute its scores from.
        raise SmoothrankError(f"{path}: unreadable scores ({err or type(err).__name__}); delete its folder "
                              f"{Path(path).parent} to redo that run (or ensemble)") from None


def _rescore_neural(cell: Cell, run_dir: Path, splits: Mapping[str, Any],
                    result: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Scores of a finished neural run without ``scores.npz``, from its saved model (then checked)."""
    from smoothrank.experiments.runner import _score_splits
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
    check = _score_splits({"test": scores["test"]}, {"test": splits["test"]},
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

    Read from ``OUT/runs/<run id>/scores.npz``. A run finished by an older smoothrank has none: a
    neural run is re-scored from its saved model (``train/model.pt``), checked against its stored
    test metrics, and the scores are saved; a GBDT run keeps no model, so that is an error asking
    to delete the run folder (the next invocation redoes the run).
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
    from smoothrank.experiments.runner import RESULT_FILE

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
    from smoothrank.experiments.runner import RESULT_FILE, _score_splits, write_json

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
    if plan.weights is not None:  # absent for seed ensembles, so their stored fingerprints stay valid
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
    scored = _score_splits(combined, splits, metrics=metrics, convention=convention)
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
