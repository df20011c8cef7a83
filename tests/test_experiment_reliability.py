"""An experiment killed or failing at any moment: no orphaned workers, no misleading summary."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import two_method_spec, write_synthetic_folds

from smoothrank.cli import main as cli_main

pytest.importorskip("lightgbm")

_GBDT = {"library": "lightgbm", "objective": "lambdarank", "num_boost_round": 4, "early_stopping_rounds": 2,
         "params": {"min_data_in_leaf": 3}}


@pytest.fixture(scope="module")
def folds(tmp_path_factory) -> Path:
    return write_synthetic_folds(tmp_path_factory.mktemp("letor"), seed=5, queries=(20, 8, 8), docs=6)


def _gbdt_spec(root: Path, tmp_path: Path, datasets: list[dict] | None = None, **extra) -> Path:
    spec = two_method_spec(root, **{"seeds": [0], "losses": [], "models": [], "gbdt": [_GBDT], **extra})
    if datasets is not None:
        spec["datasets"] = datasets
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_a_summary_after_a_failed_run_says_it_is_incomplete(folds, tmp_path, capsys):
    bad = tmp_path / "bad"
    bad.mkdir()
    for name in ("train.txt", "vali.txt"):
        (bad / name).write_text((folds / name).read_text())
    (bad / "test.txt").write_text((folds / "test.txt").read_text() + "1 qid:999 1:oops\n")
    datasets = [{"name": "good", "train": str(folds / "train.txt"), "valid": str(folds / "vali.txt"),
                 "test": str(folds / "test.txt")},
                {"name": "bad", "train": str(bad / "train.txt"), "valid": str(bad / "vali.txt"),
                 "test": str(bad / "test.txt")}]
    out = tmp_path / "out"
    spec = _gbdt_spec(folds, tmp_path, datasets)
    assert cli_main(["experiment", str(spec), "--out", str(out), "--quiet"]) == 1
    assert "1 run(s) failed" in capsys.readouterr().err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] is False
    assert list(summary["missing"]) == ["bad--files--lightgbm-lambdarank--seed0"]
    assert "test.txt" in summary["missing"]["bad--files--lightgbm-lambdarank--seed0"]
    markdown = (out / "summary.md").read_text()
    # right under the title, before any table
    assert markdown.split("\n## ")[1].startswith("Incomplete: 1 run(s) of the spec have no result")
    assert "`bad--files--lightgbm-lambdarank--seed0`" in markdown


def test_a_complete_summary_says_so(folds, tmp_path):
    out = tmp_path / "out"
    assert cli_main(["experiment", str(_gbdt_spec(folds, tmp_path)), "--out", str(out), "--quiet"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["complete"] is True and summary["missing"] == {}
    assert "Incomplete" not in (out / "summary.md").read_text()


def test_an_interrupted_rerun_leaves_no_summary_of_the_old_spec(folds, tmp_path, monkeypatch):
    out = tmp_path / "out"
    assert cli_main(["experiment", str(_gbdt_spec(folds, tmp_path)), "--out", str(out), "--quiet"]) == 0
    assert (out / "summary.md").is_file()
    changed = _gbdt_spec(folds, tmp_path, gbdt=[_GBDT, {**_GBDT, "objective": "rank_xendcg"}])
    import smoothrank.experiments as experiments

    def interrupted(*_args, **_kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(experiments, "run_experiment", interrupted)
    assert cli_main(["experiment", str(changed), "--out", str(out), "--quiet"]) == 130
    assert not any((out / name).exists() for name in ("summary.md", "summary.csv", "summary.json"))
    assert yaml.safe_load((out / "spec.yaml").read_text())["gbdt"][1]["objective"] == "rank_xendcg"


def _descendants(pid: int) -> set[int]:
    """Every living process whose parent chain reaches ``pid`` (from /proc)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if fields[0] != "Z":
                parents[int(entry)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _started(pid: int) -> str | None:
    """The start time of process ``pid`` (clock ticks since boot), None if it is gone: tells a
    process from a later one that was given the same pid."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _kill_all(processes: dict[int, str | None]) -> None:
    """SIGKILL each of ``processes`` (pid: start time) that is still the same process."""
    for pid, started in processes.items():
        if started is not None and _started(pid) == started:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_workers_end_when_the_parent_is_killed(folds, tmp_path):
    # Long neural runs in two workers; the parent is SIGKILLed (no handler runs) once both workers
    # have started runs. The workers must not live on, holding the command's output pipes.
    spec = two_method_spec(folds, seeds=[0, 1], gbdt=[])
    spec["neural"]["training"].update({"epochs": 100000, "early_stopping_patience": None})
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    out = tmp_path / "out"
    parent = subprocess.Popen([sys.executable, "-m", "smoothrank", "experiment", str(path), "--out", str(out),
                               "--workers", "2", "--quiet"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    children: dict[int, str | None] = {}  # found before the kill: a dead parent has no descendants
    try:
        deadline = time.monotonic() + 240
        while len(list(out.glob("runs/*/cell.json"))) < 2:
            assert parent.poll() is None, "the experiment ended on its own"
            assert time.monotonic() < deadline, "the workers did not start their runs"
            time.sleep(0.5)
        children = {pid: _started(pid) for pid in _descendants(parent.pid)}
        assert children, "no worker processes"
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 30
        while any(_alive(p) for p in children) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [p for p in children if _alive(p)], "workers outlived their parent"
    finally:
        if parent.poll() is None:
            parent.kill()
        _kill_all({**children, **{pid: _started(pid) for pid in _descendants(parent.pid)}})


# A stand-in for a worker of the pool: the runner's initializer, then a run that waits inside a
# __del__, where Python reports the signal handler's KeyboardInterrupt as "Exception ignored" and
# goes on (as in llvmlite's __del__ and ctypes callbacks during a Numba compilation).
_WORKER = """
import os, sys, time
from pathlib import Path
from smoothrank.experiments import runner

parent = int(sys.argv[1])
Path(sys.argv[3]).write_text(str(os.getpid()))
while sys.argv[2] == "parent-dies-first" and os.getppid() == parent:
    time.sleep(0.01)
runner._STOP_DEADLINE_S = 1.0
runner._worker_signals(parent)
runner._worker_state["in_run"] = sys.argv[2] == "interrupt-lost"

class Swallows:
    def __del__(self):
        Path(sys.argv[3] + ".armed").touch()
        while True:
            time.sleep(0.05)

while True:
    Swallows()
"""

# The worker's parent: starts the worker, then waits to be killed, or leaves at once.
_PARENT = """
import os, subprocess, sys, time
subprocess.Popen([sys.executable, "-c", sys.argv[1], str(os.getpid()), *sys.argv[2:]])
if sys.argv[2] != "parent-dies-first":
    time.sleep(600)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("case", ["interrupt-lost", "parent-dies-first"])
def test_a_worker_ends_soon_after_its_parent_at_any_moment(tmp_path, case):
    # interrupt-lost: the KeyboardInterrupt of the parent-death SIGTERM never reaches the run, and
    # the worker must still end (the deadline). parent-dies-first: the parent is gone before the
    # worker's initializer runs, so no parent-death signal will come.
    ready, log = tmp_path / "worker.pid", tmp_path / "worker.log"
    with log.open("w") as stderr:
        parent = subprocess.Popen([sys.executable, "-c", _PARENT, _WORKER, case, str(ready)], stderr=stderr,
                                  start_new_session=True)
    worker: dict[int, str | None] = {}
    try:
        deadline = time.monotonic() + 120
        while not ready.is_file() or not ready.read_text():
            assert time.monotonic() < deadline, "the worker did not start"
            time.sleep(0.05)
        pid = int(ready.read_text())
        worker = {pid: _started(pid)}
        if case == "interrupt-lost":
            while not Path(f"{ready}.armed").is_file():
                assert _alive(pid) and time.monotonic() < deadline, log.read_text()
                time.sleep(0.05)
            parent.kill()
        parent.wait()
        deadline = time.monotonic() + 20
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(pid), "the worker outlived its parent"
        if case == "interrupt-lost":  # the case happened: the interrupt was lost in the __del__
            assert "in __del__" in log.read_text() and "KeyboardInterrupt" in log.read_text()
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        _kill_all(worker)
