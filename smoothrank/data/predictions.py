"""Reading LETOR prediction files (one score per line, in the feature file's line order) and TREC runs."""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np

from smoothrank.data._io import read_bytes
from smoothrank.data.dataset import Dataset
from smoothrank.errors import DataFormatError, SmoothrankError

# Decimal numbers as C's strtod and Perl read them, plus nan/inf (refused below with their own message).
_SCORE = re.compile(rb"[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|nan|inf|infinity)", re.IGNORECASE)


def read_predictions(path: str | os.PathLike[str], *, expected: int | None = None) -> np.ndarray:
    """Read a prediction file (plain or gzip; LF or CRLF) as float64, one score per line.

    The format of the official LETOR evaluation scripts: line i holds the score of the i-th
    document line of the feature file. A trailing newline is optional; an empty line, a
    non-numeric or a non-finite score is a :class:`DataFormatError` naming the file and line,
    and so is a line count different from ``expected`` when it is given.
    """
    return _parse_predictions(read_bytes(Path(path)), Path(path), expected)


def _parse_predictions(raw: bytes, path: Path, expected: int | None) -> np.ndarray:
    if expected is not None and (isinstance(expected, bool) or int(expected) != expected or expected < 0):
        raise SmoothrankError(f"expected: a non-negative integer or None, got {expected!r}")
    lines = raw.splitlines()
    if lines and not lines[-1].strip():
        lines = lines[:-1]  # tolerate one trailing blank line (a doubled final newline)
    scores = np.empty(len(lines), dtype=np.float64)
    for i, raw in enumerate(lines):
        text = raw.strip()
        shown = repr(text[:40].decode("utf-8", "replace"))
        # float() alone would also take Python-only syntax ("1_0" is 10.0) that other tools read otherwise
        if not _SCORE.fullmatch(text):
            why = "is empty" if not text else f"is not a number: {shown}"
            raise DataFormatError(f"{path}:{i + 1}: the score {why}")
        value = float(text)
        if not np.isfinite(value):
            raise DataFormatError(f"{path}:{i + 1}: the score is not finite: {shown}")
        scores[i] = value
    if expected is not None and len(lines) != expected:
        where = f"{path}:{len(lines) + 1}" if len(lines) < expected else f"{path}:{expected + 1}"
        raise DataFormatError(f"{where}: expected {expected} scores (one per document line), "
                              f"the file has {len(lines)}")
    return scores


def is_trec_run(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` reads as a TREC run (``qid Q0 docid rank score tag``): its first non-blank
    line has six fields, the fourth a whole number and the fifth a number. A LETOR prediction file
    has one field a line."""
    return _looks_like_trec(read_bytes(Path(path)))


def _looks_like_trec(raw: bytes) -> bool:
    for line in raw.splitlines():
        fields = line.split()
        if fields:
            return len(fields) == 6 and fields[3].isdigit() and bool(_SCORE.fullmatch(fields[4]))
    return False


def read_scores(path: str | os.PathLike[str], dataset: Dataset) -> np.ndarray:
    """The scores of a prediction file for ``dataset``'s rows (float64, row order), the file read
    once (it may be a pipe): a TREC run (:func:`read_trec_run`) or a LETOR prediction file, one
    score per line in the data file's line order (:func:`read_predictions`)."""
    path = Path(path)
    raw = read_bytes(path)
    if _looks_like_trec(raw):
        return _parse_trec_run(raw, path, dataset)
    predictions = _parse_predictions(raw, path, dataset.n_docs)
    # Prediction i belongs to the i-th data line of the file, whatever the dataset's row order.
    scores = np.empty(dataset.n_docs, dtype=np.float64)
    scores[np.argsort(dataset.line_numbers, kind="stable")] = predictions
    return scores


def read_trec_run(path: str | os.PathLike[str], dataset: Dataset) -> np.ndarray:
    """The scores of a TREC run (``qid Q0 docid rank score tag``) for ``dataset``'s rows, float64 in
    row order, matched by query id and document id (the LETOR file's ``#docid = ...`` comment, or
    the line number where it has none). The rank column is not read: documents are ranked by score,
    as trec_eval does. Every document of the dataset needs exactly one line; a malformed line, a
    document the dataset does not have, one given twice, or one missing is a
    :class:`DataFormatError` naming the file and line (or, for a missing one, its qid and docid)."""
    return _parse_trec_run(read_bytes(Path(path)), Path(path), dataset)


def _parse_trec_run(raw: bytes, path: Path, dataset: Dataset) -> np.ndarray:
    from smoothrank.data.writers import check_unique_docs

    check_unique_docs(dataset)
    query = dataset.query_of_row()
    qids = np.asarray([str(q) for q in dataset.qids])
    row_of = {(qids[query[i]], str(d)): i for i, d in enumerate(dataset.doc_ids.tolist())}
    scores = np.full(dataset.n_docs, np.nan)
    seen_at = np.zeros(dataset.n_docs, dtype=np.int64)
    for lineno, line in enumerate(raw.splitlines(), 1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 6 or not _SCORE.fullmatch(fields[4]):
            shown = line[:60].decode("utf-8", "replace")
            raise DataFormatError(f"{path}:{lineno}: expected a TREC run line 'qid Q0 docid rank score tag', "
                                  f"got {shown!r}")
        key = (fields[0].decode("utf-8", "replace"), fields[2].decode("utf-8", "replace"))
        row = row_of.get(key)
        if row is None:
            raise DataFormatError(f"{path}:{lineno}: qid {key[0]!r} docid {key[1]!r} is not a document of "
                                  f"{dataset.source}")
        if seen_at[row]:
            raise DataFormatError(f"{path}:{lineno}: qid {key[0]!r} docid {key[1]!r} already given on line "
                                  f"{seen_at[row]}")
        value = float(fields[4])
        if not np.isfinite(value):
            raise DataFormatError(f"{path}:{lineno}: the score is not finite: {fields[4].decode()!r}")
        scores[row], seen_at[row] = value, lineno
    if not seen_at.all():
        row = int(np.argmin(seen_at))
        missing, doc = int((seen_at == 0).sum()), str(dataset.doc_ids[row])
        raise DataFormatError(f"{path}: no line for qid {qids[query[row]]!r} docid {doc!r} "
                              f"({dataset.source}:{dataset.line_numbers[row]}); {missing} of "
                              f"{dataset.n_docs} documents have no score")
    return scores
