"""Compiled (Numba) scanner for the common, clean case of a LETOR / SVMlight chunk.

The scanner never reports errors itself. It parses text that is unambiguously well formed and
returns a nonzero status for anything else (a malformed token, NaN/inf, an unsorted or repeated
index, a lone carriage return, ...); the caller then hands the whole input to the strict
vectorised parser of :mod:`smoothrank.data.letor`, which is the one that locates the problem and
names the file and line. So the scanner may be conservative, but whatever it accepts must be
read exactly as the strict parser reads it.

Numbers: the decimal significand (at most 18 digits, at most 2**53) and the power of ten
(``|e| <= 22``) are both exact doubles, so one IEEE multiplication or division gives the
correctly rounded double (Clinger's fast path, W. D. Clinger, "How to read floating point
numbers accurately", PLDI 1990), the same double as ``strtod``; it is then rounded to float32
like the strict parser does. Any other number (more digits, a large exponent) is marked "slow"
and parsed by Python's ``float`` afterwards.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from smoothrank.data.dataset import F32_LIMIT

OK = 0
LONE_CR = 1
BAD_LABEL = 2
EMPTY_QID = 3
BAD_TOKEN = 4
NULL_REFUSED = 5
UNSORTED = 6
INDEX_TOO_LARGE = 7
VALUE_RANGE = 8
TOO_MANY = 9

FAST, SLOW, INVALID = 0, 1, 2
MAX_INDEX = 2**31 - 2
_POW10 = np.array([10.0**k for k in range(23)], dtype=np.float64)  # all exact doubles
_TWO53 = 2**53


@nb.njit(cache=True, nogil=True, inline="always")
def _ws(c):
    # bytes.split() and the regex \s on bytes: space, \t, \r, \v, \f (and \n, handled apart)
    return c == 32 or c == 9 or c == 13 or c == 11 or c == 12


@nb.njit(cache=True, nogil=True, inline="always")
def _digit(c):
    return 48 <= c <= 57


@nb.njit(cache=True, nogil=True)
def _number(buf, i, end):
    """Parse ``buf[i:end]`` as ``[+-]?(d+[.d*]|.d+)([eE][+-]?d+)?``: (value, FAST|SLOW|INVALID)."""
    neg = False
    if i < end and (buf[i] == 43 or buf[i] == 45):
        neg = buf[i] == 45
        i += 1
    mant = 0
    ndig = 0
    scale = 0
    ndigits = 0
    slow = False
    while i < end and _digit(buf[i]):
        d = buf[i] - 48
        if mant > 0 or d > 0:
            if ndig < 18:
                mant = mant * 10 + d
                ndig += 1
            else:
                slow = True
        ndigits += 1
        i += 1
    if i < end and buf[i] == 46:
        i += 1
        while i < end and _digit(buf[i]):
            d = buf[i] - 48
            if mant > 0 or d > 0:
                if ndig < 18:
                    mant = mant * 10 + d
                    ndig += 1
                    scale -= 1
                else:
                    slow = True
            else:
                scale -= 1
            ndigits += 1
            i += 1
    if ndigits == 0:
        return 0.0, INVALID
    exp = 0
    if i < end and (buf[i] == 101 or buf[i] == 69):
        i += 1
        eneg = False
        if i < end and (buf[i] == 43 or buf[i] == 45):
            eneg = buf[i] == 45
            i += 1
        nexp = 0
        while i < end and _digit(buf[i]):
            if exp < 100000:
                exp = exp * 10 + (buf[i] - 48)
            nexp += 1
            i += 1
        if nexp == 0:
            return 0.0, INVALID
        if eneg:
            exp = -exp
    if i != end:
        return 0.0, INVALID
    if slow:
        return 0.0, SLOW
    if mant == 0:
        value = 0.0
    elif mant > _TWO53:
        return 0.0, SLOW
    else:
        e10 = scale + exp
        if 0 <= e10 <= 22:
            value = float(mant) * _POW10[e10]
        elif -22 <= e10 < 0:
            value = float(mant) / _POW10[-e10]
        else:
            return 0.0, SLOW
    return (-value if neg else value), FAST


@nb.njit(cache=True, nogil=True)
def scan_chunk(buf, null_value, null_ok, row_line, row_label, row_q, row_d, row_same_qid,
               tok_row, tok_col, tok_val, slow):
    """Scan one chunk of whole lines.

    Fills, per data row: 1-based line number within the chunk, label, the qid span
    (``row_q[r] = (start, end)``, ``(-1, -1)`` without ``qid:``), the ``docid = X`` span of the
    comment (or -1), whether the qid equals the previous row's; per feature token: row, raw
    index, float32 value; per slow number: ``(start, end, target)`` with target = token index,
    or ``-1 - row`` for a label. Returns ``(status, n_rows, n_tokens, n_slow, max_index,
    line_of_failure)``.
    """
    n = buf.shape[0]
    pos = 0
    line = 0
    r = 0
    t = 0
    s = 0
    max_index = -1
    while pos < n:
        e = pos
        while e < n and buf[e] != 10:
            e += 1
        line += 1
        h = pos
        while h < e and buf[h] != 35:
            h += 1
        if _lone_cr(buf, pos, e):  # bytes.splitlines() would start a new line there
            return LONE_CR, r, t, s, max_index, line
        i = pos
        while i < h and _ws(buf[i]):
            i += 1
        if i >= h:
            pos = e + 1
            continue
        if r >= row_line.shape[0]:
            return TOO_MANY, r, t, s, max_index, line
        status, i, s = _label_and_qid(buf, i, h, r, row_label, row_q, slow, s)
        if status != OK:
            return status, r, t, s, max_index, line
        row_same_qid[r] = _same_qid(buf, row_q, r)
        status, t, s, max_index = _features(buf, i, h, r, t, s, max_index, null_value, null_ok,
                                            tok_row, tok_col, tok_val, slow)
        if status != OK:
            return status, r, t, s, max_index, line
        _docid(buf, h, e, r, row_d)
        row_line[r] = line
        r += 1
        pos = e + 1
    return OK, r, t, s, max_index, line


@nb.njit(cache=True, nogil=True, inline="always")
def _lone_cr(buf, pos, e):
    """Whether ``buf[pos:e]`` holds a carriage return other than right before the line end."""
    for k in range(pos, e - 1):
        if buf[k] == 13:
            return True
    return False


@nb.njit(cache=True, nogil=True)
def _label_and_qid(buf, i, h, r, row_label, row_q, slow, s):
    """The label and the ``qid:`` span of row ``r`` from ``buf[i:h]``: ``(status, next, n_slow)``."""
    j = i
    while j < h and not _ws(buf[j]):
        j += 1
    value, kind = _number(buf, i, j)
    if kind == INVALID:
        return BAD_LABEL, i, s
    if kind == SLOW:
        slow[s, 0] = i
        slow[s, 1] = j
        slow[s, 2] = -1 - r
        s += 1
    row_label[r] = value
    i = j
    while i < h and _ws(buf[i]):
        i += 1
    row_q[r, 0] = -1
    row_q[r, 1] = -1
    if i + 4 <= h and buf[i] == 113 and buf[i + 1] == 105 and buf[i + 2] == 100 and buf[i + 3] == 58:
        j = i + 4
        while j < h and not _ws(buf[j]):
            j += 1
        if j == i + 4:
            return EMPTY_QID, i, s
        row_q[r, 0] = i + 4
        row_q[r, 1] = j
        i = j
    return OK, i, s


@nb.njit(cache=True, nogil=True, inline="always")
def _same_qid(buf, row_q, r):
    """Whether rows ``r`` and ``r - 1`` both have a qid, the same bytes."""
    if r == 0 or row_q[r, 0] < 0 or row_q[r - 1, 0] < 0:
        return False
    a0 = row_q[r, 0]
    b0 = row_q[r - 1, 0]
    length = row_q[r, 1] - a0
    if length != row_q[r - 1, 1] - b0:
        return False
    for m in range(length):
        if buf[a0 + m] != buf[b0 + m]:
            return False
    return True


@nb.njit(cache=True, nogil=True)
def _features(buf, i, h, r, t, s, max_index, null_value, null_ok, tok_row, tok_col, tok_val, slow):
    """The ``index:value`` tokens of row ``r`` in ``buf[i:h]``: ``(status, n_tokens, n_slow, max_index)``."""
    prev = -1
    while True:
        while i < h and _ws(buf[i]):
            i += 1
        if i >= h:
            return OK, t, s, max_index
        j = i
        index = 0
        while j < h and _digit(buf[j]):
            if index <= MAX_INDEX:
                index = index * 10 + (buf[j] - 48)
            j += 1
        if j == i or j >= h or buf[j] != 58:
            return BAD_TOKEN, t, s, max_index
        if index > MAX_INDEX:
            return INDEX_TOO_LARGE, t, s, max_index
        if index <= prev:
            return UNSORTED, t, s, max_index
        prev = index
        i = j + 1
        j = i
        while j < h and not _ws(buf[j]):
            j += 1
        if t >= tok_row.shape[0]:
            return TOO_MANY, t, s, max_index
        if j - i == 4 and buf[i] == 78 and buf[i + 1] == 85 and buf[i + 2] == 76 and buf[i + 3] == 76:
            if not null_ok:
                return NULL_REFUSED, t, s, max_index
            value = null_value
        else:
            value, kind = _number(buf, i, j)
            if kind == INVALID:
                return BAD_TOKEN, t, s, max_index
            if kind == SLOW:
                slow[s, 0] = i
                slow[s, 1] = j
                slow[s, 2] = t
                s += 1
        if abs(value) >= F32_LIMIT:
            return VALUE_RANGE, t, s, max_index
        tok_row[t] = r
        tok_col[t] = index
        tok_val[t] = np.float32(value)
        t += 1
        if index > max_index:
            max_index = index
        i = j


@nb.njit(cache=True, nogil=True)
def _docid(buf, h, e, r, row_d):
    """The span of the first ``docid\\s*=\\s*(\\S+)`` in the comment ``buf[h:e]`` into ``row_d[r]``
    (``(-1, -1)`` if none)."""
    row_d[r, 0] = -1
    row_d[r, 1] = -1
    k = h
    while k + 5 <= e:
        if buf[k] == 100 and buf[k + 1] == 111 and buf[k + 2] == 99 and buf[k + 3] == 105 \
                and buf[k + 4] == 100:
            m = k + 5
            while m < e and _ws(buf[m]):
                m += 1
            if m < e and buf[m] == 61:
                m += 1
                while m < e and _ws(buf[m]):
                    m += 1
                start = m
                while m < e and not _ws(buf[m]):
                    m += 1
                if m > start:
                    row_d[r, 0] = start
                    row_d[r, 1] = m
                    return
        k += 1


@nb.njit(cache=True, nogil=True)
def scatter(block, tok_row, tok_col, tok_val):
    """``block[tok_row, tok_col] = tok_val`` without fancy-indexing temporaries."""
    for t in range(tok_row.shape[0]):
        block[tok_row[t], tok_col[t]] = tok_val[t]
