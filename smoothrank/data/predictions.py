"""Reading LETOR prediction files: one score per line, in the feature file's line order."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from smoothrank.data._io import read_bytes
from smoothrank.errors import DataFormatError, SmoothrankError


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
        try:
            value = float(text)
        except ValueError:
            why = "is empty" if not text else f"is not a number: {text[:40].decode('utf-8', 'replace')!r}"
            raise DataFormatError(f"{path}:{i + 1}: the score {why}") from None
        if not np.isfinite(value):
            raise DataFormatError(f"{path}:{i + 1}: the score is not finite: "
                                  f"{text.decode('utf-8', 'replace')!r}")
        scores[i] = value
    if expected is not None and len(lines) != expected:
        where = f"{path}:{len(lines) + 1}" if len(lines) < expected else f"{path}:{expected + 1}"
        raise DataFormatError(f"{where}: expected {expected} scores (one per document line), "
                              f"the file has {len(lines)}")
    return scores
