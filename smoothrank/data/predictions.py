"""Reading LETOR prediction files: one score per line, in the feature file's line order."""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np

from smoothrank.data._io import read_bytes
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
    path = Path(path)
    if expected is not None and (isinstance(expected, bool) or int(expected) != expected or expected < 0):
        raise SmoothrankError(f"expected: a non-negative integer or None, got {expected!r}")
    lines = read_bytes(path).splitlines()
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
