from __future__ import annotations

import contextlib
import gzip
import importlib.util
import os
import random
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import numpy as np
import pytest
import torch

REPO = Path(__file__).resolve().parent.parent
# The shared specification and data folder: beside the checkout, or where SMOOTHRANK_SHARED says.
SHARED = Path(os.environ.get("SMOOTHRANK_SHARED") or REPO.parent / "shared")


@pytest.fixture(autouse=True)
def _seeded(request: pytest.FixtureRequest) -> None:
    """Python's, NumPy's and PyTorch's global generators seeded per test (from its id, and from
    ``SMOOTHRANK_TEST_SEED`` when set): a draw a test leaves unseeded is the same on every run, so a
    failure replays; set the variable to another number to explore other draws."""
    seed = zlib.crc32(f"{os.environ.get('SMOOTHRANK_TEST_SEED', '')}{request.node.nodeid}".encode())
    random.seed(seed)
    np.random.seed(seed)  # noqa: NPY002 - the legacy global generator is the one unseeded draws use
    torch.manual_seed(seed)


T = TypeVar("T")


def on_one_and_two_numba_threads(compute: Callable[[], T]) -> list[T]:
    """``compute()`` with Numba on one thread, then on two (as many as it has, up to two), Numba's
    thread count restored after: for the tests that a kernel's bits do not depend on it."""
    import numba

    before, results = numba.get_num_threads(), []
    try:
        for count in (1, min(2, numba.config.NUMBA_NUM_THREADS)):
            numba.set_num_threads(count)
            results.append(compute())
    finally:
        numba.set_num_threads(before)
    return results


def load_experiment_script(name: str) -> ModuleType:
    """``experiments/<name>.py`` (a script, not a package module) imported as a module."""
    spec = importlib.util.spec_from_file_location(name, REPO / "experiments" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The shared specification and data folder beside the checkout (tests may read it)."""
    if not (SHARED / "data").is_dir():
        pytest.fail(f"the shared data folder is missing: {SHARED} (set SMOOTHRANK_SHARED to its path)")
    return SHARED


def sigint_as_from_a_terminal() -> None:
    """``preexec_fn`` for a child that the test interrupts with SIGINT.

    A shell starts background jobs (``bash scripts/test &``, ``nohup``) with SIGINT ignored, and an
    ignored signal stays ignored across exec, where Python then installs no KeyboardInterrupt
    handler: without this, the child would not see the test's Ctrl-C at all.
    """
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


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


def write_fold1_slices(shared_dir: Path, folder: Path, *, train: tuple[int, int], valid: int,
                       test: int) -> dict[str, Path]:
    """MQ2008 Fold1 slices as plain files in ``folder``: training queries ``train = (first, count)``,
    the first ``valid`` validation and ``test`` test queries."""
    fold = shared_dir / "data" / "MQ2008" / "Fold1"
    return {"train": write_slice(fold / "train.txt.gz", folder / "train.txt", *train),
            "valid": write_slice(fold / "vali.txt.gz", folder / "vali.txt", 0, valid),
            "test": write_slice(fold / "test.txt.gz", folder / "test.txt", 0, test)}


def write_synthetic_letor(path: Path, rng: np.random.Generator, n_queries: int, docs: int, qid0: int, *,
                          n_features: int = 5, noise: float = 0.3) -> None:
    """A learnable LETOR file: relevance 0/1/2 driven by feature 1 plus noise (ties in the labels)."""
    lines = []
    for q in range(n_queries):
        x = rng.normal(size=(docs, n_features))
        labels = np.digitize(x[:, 0] + noise * rng.normal(size=docs), [0.3, 1.0])
        for d in range(docs):
            feats = " ".join(f"{j + 1}:{x[d, j]:.5f}" for j in range(n_features))
            lines.append(f"{labels[d]} qid:{qid0 + q} {feats} #docid = D{qid0 + q}-{d}")
    path.write_text("\n".join(lines) + "\n")


def write_synthetic_folds(root: Path, *, seed: int, queries: tuple[int, int, int], docs: int,
                          n_features: int = 5, noise: float = 0.3) -> Path:
    """``train.txt``, ``vali.txt``, ``test.txt`` of :func:`write_synthetic_letor` lists under ``root``."""
    rng = np.random.default_rng(seed)
    for name, n, qid0 in zip(("train", "vali", "test"), queries, (1, 100, 200), strict=True):
        write_synthetic_letor(root / f"{name}.txt", rng, n, docs, qid0, n_features=n_features, noise=noise)
    return root


def zscore_loop(s: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Per-query z-scores written as a plain loop: the reference for ensemble and blend tests."""
    out = np.zeros_like(s)
    for q in range(len(offsets) - 1):
        part = s[offsets[q]:offsets[q + 1]]
        if part.std() > 0:
            out[offsets[q]:offsets[q + 1]] = (part - part.mean()) / part.std()
    return out


def two_method_spec(root: Path, **extra: object) -> dict:
    """A tiny experiment spec on :func:`write_synthetic_folds` files under ``root``: a linear NeuralNDCG
    scorer and LightGBM lambdarank, two seeds each, a few seconds in all; ``extra`` keys override."""
    return {
        "name": "tiny",
        "convention": "letor4",
        "seeds": [0, 1],
        "datasets": [{"name": "syn", "train": str(root / "train.txt"), "valid": str(root / "vali.txt"),
                      "test": str(root / "test.txt")}],
        "neural": {"training": {"epochs": 2, "batch_size": 8, "list_size": 8}},
        "losses": ["neural_ndcg"],
        "models": [{"label": "linear", "kind": "linear"}],
        "gbdt": [{"library": "lightgbm", "objective": "lambdarank", "num_boost_round": 5,
                  "early_stopping_rounds": 3, "params": {"min_data_in_leaf": 3}}],
        **extra,
    }


def assert_spec_problems(data: dict, fragments: list[str], *, source: str = "spec") -> None:
    """``data`` is refused as an experiment spec, and the error names every one of ``fragments``."""
    from smoothrank.errors import ConfigError
    from smoothrank.experiments import spec_from_dict

    with pytest.raises(ConfigError, match="problem") as info:
        spec_from_dict(data, source=source)
    for fragment in fragments:
        assert fragment in str(info.value), fragment



def _hold_folder_lock(folder: Path, ready: Any, go: Path) -> None:
    import time

    from smoothrank._atomic import folder_lock

    with folder_lock(folder, "a test holder"):
        ready.set()
        while not go.exists():
            time.sleep(0.05)


@contextlib.contextmanager
def folder_held_by_another_process(folder: Path, scratch: Path) -> Iterator[None]:
    """While inside, a forked process holds ``folder``'s lock (smoothrank._atomic.folder_lock)."""
    import multiprocessing

    context = multiprocessing.get_context("fork")
    ready, go = context.Event(), scratch / "go"
    holder = context.Process(target=_hold_folder_lock, args=(folder, ready, go))
    holder.start()
    try:
        assert ready.wait(30)
        yield
    finally:
        go.touch()
        holder.join(30)
    assert holder.exitcode == 0
