"""What a finished run (or ensemble) leaves in its folder: ``result.json`` and ``scores.npz``, and the
scoring of per-split scores into a result's metrics.

``OUT/runs/<run id>/result.json`` (written last and atomically: a run is finished iff it exists)
holds the run's metrics per split and its per-query test values; ``scores.npz`` holds the selected
model's float64 scores per split in dataset row order.
"""

from __future__ import annotations

import zipfile
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from smoothrank._atomic import atomic_writer, strict_json, write_text_atomic
from smoothrank.errors import SmoothrankError

__all__ = ["RESULT_FILE", "SCORES_FILE", "read_scores", "score_splits", "write_json", "write_scores"]

RESULT_FILE = "result.json"
SCORES_FILE = "scores.npz"


def write_json(path: Path, data: Any) -> None:
    """Write ``data`` as JSON atomically (temporary file in the same folder, then ``os.replace``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # Strict JSON has no NaN: a skipped query is written as null.
    write_text_atomic(path, strict_json(data, indent=1) + "\n")


def write_scores(path: str | Path, scores: Mapping[str, Any]) -> None:
    """Write ``{split: scores}`` as an ``.npz`` of float64 arrays, atomically."""
    arrays: dict[str, Any] = {name: np.asarray(values, dtype=np.float64) for name, values in scores.items()}
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



def score_splits(scores: Mapping[str, np.ndarray], splits: Mapping[str, Any], *, metrics: Sequence[str],
                 convention: str) -> dict[str, Any]:
    """The ``metrics`` and ``per_query`` parts of a result: the mean of each metric per split (under
    ``convention``, :func:`smoothrank.metrics.evaluate_flat`) and, for the test split, the per-query
    values with their query ids (for the paired t-test). ``scores[name]`` has shape
    ``(splits[name].n_docs,)``."""
    from smoothrank.metrics import evaluate_flat, mean_metrics

    out: dict[str, Any] = {"metrics": {}, "per_query": {}}
    for name, values in scores.items():
        dataset = splits[name]
        per_query = evaluate_flat(values, dataset.labels, offsets=dataset.offsets, metrics=list(metrics),
                                  convention=convention, doc_ids=dataset.doc_ids)
        out["metrics"][name] = mean_metrics(per_query)
        if name == "test":
            out["per_query"] = {"qids": [str(q) for q in dataset.qids],
                                **{m: [float(v) for v in per_query[m].tolist()] for m in metrics}}
    return out
