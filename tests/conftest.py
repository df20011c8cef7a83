from __future__ import annotations

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
