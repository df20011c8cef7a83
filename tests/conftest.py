from __future__ import annotations

import gzip
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The shared specification and data folder beside the checkout (tests may read it)."""
    if not (SHARED / "data").is_dir():
        pytest.fail(f"the shared data folder is missing: {SHARED}")
    return SHARED


def write_slice(source: Path, target: Path, first: int, count: int) -> Path:
    """Queries ``first .. first+count-1`` (in file order) of a gzip LETOR file, as plain text."""
    kept, seen, last = [], -1, None
    with gzip.open(source, "rt") as handle:
        for line in handle:
            qid = line.split()[1]
            if qid != last:
                seen, last = seen + 1, qid
            if seen >= first + count:
                break
            if seen >= first:
                kept.append(line)
    target.write_text("".join(kept))
    return target
