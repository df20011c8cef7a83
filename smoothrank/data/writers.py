"""Writing predictions, TREC run and qrels files, and LETOR feature files; all atomically."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import IO

import numpy as np

from smoothrank.data import store
from smoothrank.data._io import atomic_writer
from smoothrank.data.dataset import Dataset
from smoothrank.errors import SmoothrankError

_WHITESPACE = re.compile(r"\s")
_LINES_PER_WRITE = 1 << 16


def _scores_array(scores: object, n: int | None, argument: str = "scores") -> np.ndarray:
    try:
        import torch

        if isinstance(scores, torch.Tensor):
            scores = scores.detach().cpu().double().numpy()
    except ImportError:  # pragma: no cover - torch is a dependency
        pass
    raw = np.asarray(scores)
    if raw.dtype.kind not in "iuf":  # None, strings, objects, complex: not scores (None would be NaN)
        raise SmoothrankError(f"{argument}: expected numbers, got an array of dtype {raw.dtype}")
    if raw.ndim > 1:
        raise SmoothrankError(f"{argument}: expected one score per document (1-D), got shape {raw.shape}")
    array = raw.astype(np.float64).reshape(-1)
    if n is not None and array.shape[0] != n:
        raise SmoothrankError(f"{argument}: expected {n} scores (one per document), got {array.shape[0]}")
    if not np.all(np.isfinite(array)):
        i = int(np.argmax(~np.isfinite(array)))
        raise SmoothrankError(f"{argument}: score {i} is not finite ({array[i]})")
    return array


def _format(values: np.ndarray) -> list[str]:
    # repr of a float64 round-trips exactly, so ties and orderings survive a write-read cycle.
    return [repr(v) for v in values.tolist()]


def write_predictions(path: str | os.PathLike[str], scores: object, *,
                      dataset: Dataset | None = None) -> None:
    """Write a LETOR prediction file: one score per line (exact float64 text).

    ``scores`` follows the dataset's row order. With ``dataset=`` given, lines are written in
    the source file's line order (``dataset.line_numbers``), which differs from the row order
    only for a dataset read with ``regroup=True``; this is the order the LETOR scripts expect.
    """
    array = _scores_array(scores, dataset.n_docs if dataset is not None else None)
    order = None if dataset is None else _line_order(dataset)
    if order is not None:
        array = array[order]
    with atomic_writer(path) as handle:
        _write_lines(handle, array)


def _line_order(dataset: Dataset) -> np.ndarray | None:
    """The rows in the source file's line order, or None where the row order is it already; refuses
    a dataset whose line numbers repeat (``concat_datasets`` keeps each part's own: no single file's
    order exists)."""
    lines = np.asarray(dataset.line_numbers)
    if bool(np.all(lines[1:] > lines[:-1])):
        return None
    if np.unique(lines).shape[0] != lines.shape[0]:
        raise SmoothrankError(f"dataset: {dataset.source} repeats line numbers (rows of several files): "
                              "write each file's scores with its own dataset, or pass dataset=None for "
                              "the row order")
    return np.argsort(lines, kind="stable")


def check_trec_tag(tag: str, what: str = "tag") -> None:
    """Refuse a TREC run tag the file could not hold (empty, or with whitespace)."""
    _check_token(tag, what)


def _check_token(value: str, what: str) -> None:
    if not value or _WHITESPACE.search(value):
        # LETOR and TREC lines are split on whitespace: such a token would not read back.
        raise SmoothrankError(f"{what} {value!r} is empty or contains whitespace; the file could not hold it")


def check_unique_docs(dataset: Dataset) -> None:
    """Refuse a document id repeated within a query: trec_eval rejects such a run ("duplicate docs")
    and a qrels file would judge the document twice, so no TREC file is written with one."""
    query, docs = dataset.query_of_row(), dataset.doc_ids
    order = np.lexsort((np.arange(dataset.n_docs), docs, query))  # by query, docid, then row
    dup = (query[order][1:] == query[order][:-1]) & (docs[order][1:] == docs[order][:-1])
    if dup.any():
        k = int(np.argmax(dup))
        first, second = int(order[k]), int(order[k + 1])
        raise SmoothrankError(f"{dataset.source}: docid {str(docs[first])!r} appears more than once in qid "
                              f"{str(dataset.qids[query[first]])!r} (lines {dataset.line_numbers[first]} and "
                              f"{dataset.line_numbers[second]}); TREC run and qrels files need unique "
                              "document ids per query")


def _check_unique_qids(dataset: Dataset) -> None:
    """Refuse a qid that names two query lists: a LETOR, run or qrels file groups its lines by qid,
    so two lists under one qid (``concat_datasets`` of files numbered ``"0", "1", ...`` by ``.query``
    side files, a ``subset`` that repeats a query) would read back as one list, or be refused as
    interleaved, and a run or qrels file would hold their documents twice under one topic."""
    qids = dataset.qids
    order = np.argsort(qids, kind="stable")
    dup = qids[order][1:] == qids[order][:-1]
    if dup.any():
        k = int(np.argmax(dup))
        first, second = int(order[k]), int(order[k + 1])
        def line(q: int) -> str:  # the query's first line (an empty query has none)
            start = int(dataset.offsets[q])
            return str(dataset.line_numbers[start]) if start < int(dataset.offsets[q + 1]) else "none"

        raise SmoothrankError(f"{dataset.source}: qid {str(qids[first])!r} names two query lists (queries "
                              f"{first} and {second}, from lines {line(first)} and {line(second)}); a file "
                              "groups its lines by qid, so they would read back as one list: give each list "
                              "its own qid first")


def write_trec_run(path: str | os.PathLike[str], dataset: Dataset, scores: object, *,
                   tag: str = "smoothrank") -> None:
    """Write a TREC run file: ``qid Q0 docid rank score tag``, ranks from 1 by descending score.

    Ties keep the dataset's row order (the order the LETOR scripts use). Note that trec_eval
    re-sorts by score and breaks ties by document id itself, so tied scores may be evaluated
    differently there.
    """
    array = _scores_array(scores, dataset.n_docs)
    write_scores(path, dataset, [(0, dataset.n_queries, array)], format="trec", tag=tag)


def _trec_lines(dataset: Dataset, array: np.ndarray, first: int, stop: int, tag: str) -> list[str]:
    """The run lines of queries ``first`` to ``stop`` (excluded); ``array`` holds their rows' scores."""
    out = []
    base = int(dataset.offsets[first])
    for q in range(first, stop):
        qid = str(dataset.qids[q])
        _check_token(qid, "qid")
        lo, hi = int(dataset.offsets[q]), int(dataset.offsets[q + 1])
        order = np.argsort(-array[lo - base:hi - base], kind="stable")
        for rank, j in enumerate(order.tolist(), 1):
            doc = str(dataset.doc_ids[lo + j])
            _check_token(doc, "docid")
            out.append(f"{qid} Q0 {doc} {rank} {float(array[lo - base + j])!r} {tag}\n")
    return out


def write_scores(path: str | os.PathLike[str], dataset: Dataset,
                 chunks: Iterable[tuple[int, int, np.ndarray]], *, format: str = "letor",
                 tag: str = "smoothrank") -> None:
    """Write scores as they are computed: the file of :func:`write_predictions` (``format="letor"``,
    lines in the source file's line order) or :func:`write_trec_run` (``"trec"``), byte for byte,
    without holding every score.

    Parameters
    ----------
    path : path
        The output (temporary file, renamed into place once every chunk is written).
    dataset : Dataset
        The scored data (a :class:`~smoothrank.data.transforms.TransformedDataset` too).
    chunks : iterable of (int, int, ndarray)
        ``(first, stop, scores)``: consecutive query ranges ``first..stop-1`` covering every query
        in order, and the float64 scores (n_rows,) of their rows. Each is written when it comes,
        except for a dataset whose rows are not in line order (read with ``regroup=True``): its
        scores are kept in a file-backed scratch array and written in line order at the end.
    format : {"letor", "trec"}
    tag : str
        The run tag of a TREC run.
    """
    if format not in ("letor", "trec"):
        raise SmoothrankError(f"format: expected 'letor' or 'trec', got {format!r}")
    if format == "trec":
        _check_token(tag, "tag")
        _check_unique_qids(dataset)
        check_unique_docs(dataset)
    order = None if format == "trec" else _line_order(dataset)
    held = None if order is None else store.scratch_array((dataset.n_docs,), np.float64)
    expected = 0
    with atomic_writer(path) as handle:
        for first, stop, scores in chunks:
            lo, hi = int(dataset.offsets[first]), int(dataset.offsets[stop])
            if first != expected or stop < first:
                raise SmoothrankError(f"chunks: expected the queries from {expected} on, got {first}..{stop}")
            array = _scores_array(scores, hi - lo)
            expected = stop
            if held is not None:
                held[lo:hi] = array
            elif format == "trec":
                handle.write("".join(_trec_lines(dataset, array, first, stop, tag)).encode())
            else:
                _write_lines(handle, array)
        if expected != dataset.n_queries:
            raise SmoothrankError(f"chunks: the scores of queries {expected}.. of {dataset.n_queries} are "
                                  "missing")
        if held is not None and order is not None:  # in line order, a block at a time (order: 8 B a row)
            for start in range(0, order.shape[0], _LINES_PER_WRITE):
                _write_lines(handle, held[order[start:start + _LINES_PER_WRITE]])


def _write_lines(handle: IO[bytes], array: np.ndarray) -> None:
    for start in range(0, array.shape[0], _LINES_PER_WRITE):  # bounded memory for any size
        handle.write("".join(s + "\n" for s in _format(array[start:start + _LINES_PER_WRITE])).encode())


def write_qrels(path: str | os.PathLike[str], dataset: Dataset) -> None:
    """Write a TREC qrels file: ``qid 0 docid label`` (labels must be integers)."""
    labels = dataset.labels.astype(np.float64)
    if np.any(labels != np.round(labels)):
        i = int(np.argmax(labels != np.round(labels)))
        raise SmoothrankError(f"qrels need integer labels; row {i} (line {dataset.line_numbers[i]}) "
                              f"has {labels[i]}")
    _check_unique_qids(dataset)
    check_unique_docs(dataset)
    query_of_row = dataset.query_of_row()
    out = []
    for i in range(dataset.n_docs):
        qid, doc = str(dataset.qids[query_of_row[i]]), str(dataset.doc_ids[i])
        _check_token(qid, "qid")
        _check_token(doc, "docid")
        out.append(f"{qid} 0 {doc} {int(labels[i])}\n")
    with atomic_writer(path) as handle:
        handle.write("".join(out).encode())


def _check_finite(dataset: Dataset) -> None:
    """No NaN/inf written: the reader (and every other LETOR tool) refuses them."""
    for name, values in (("label", dataset.labels), ("feature value", dataset.features)):
        bad = ~np.isfinite(values)
        if bad.any():
            row = int(np.argmax(bad.reshape(values.shape[0], -1).any(axis=1)))
            raise SmoothrankError(f"{dataset.source}: row {row} (line {dataset.line_numbers[row]}) has a "
                                  f"non-finite {name}; a LETOR file cannot hold it")


def write_letor(path: str | os.PathLike[str], dataset: Dataset, *, sparse: bool = False,
                doc_ids: bool = True) -> None:
    """Write ``dataset`` as a LETOR file, one line ``label qid:Q 1:v 2:v #docid = D`` a document.

    float32 values are written with 9 significant digits, which reads back bit-identically.
    ``sparse=True`` omits zero values (read back with ``n_features=`` to keep trailing
    all-zero columns). A ``.gz`` path is gzip-compressed.
    """
    _check_finite(dataset)
    for qid in dataset.qids.tolist():
        _check_token(qid, "qid")
        if "#" in qid:  # the reader would take the rest of the line (the features) for a comment
            raise SmoothrankError(f"qid {qid!r} contains '#', which starts a comment in a LETOR file")
        if ":" in qid:  # the reader refuses it: the mark of a qid run into a feature token
            raise SmoothrankError(f"qid {qid!r} contains ':', which the LETOR reader refuses in a qid")
    _check_unique_qids(dataset)
    query_of_row = dataset.query_of_row()
    names = [f"{j + 1}:" for j in range(dataset.n_features)]
    with atomic_writer(path) as handle:
        for i in range(dataset.n_docs):
            row = dataset.features[i]
            cols = np.flatnonzero(row) if sparse else range(dataset.n_features)
            feats = " ".join(names[j] + f"{row[j]:.9g}" for j in cols)
            qid = str(dataset.qids[query_of_row[i]])
            line = f"{dataset.labels[i]:.9g} qid:{qid}" + (" " + feats if feats else "")
            if doc_ids:
                _check_token(str(dataset.doc_ids[i]), "docid")
                line += f" #docid = {dataset.doc_ids[i]}"
            handle.write((line + "\n").encode())
