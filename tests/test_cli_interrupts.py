"""What the command line prints when it is interrupted or warns: one line, no traceback, and for
the sub-commands whose work survives, how to continue it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import yaml
from conftest import sigint_as_from_a_terminal, write_synthetic_folds

from smoothrank.cli import main
from smoothrank.errors import SmoothrankWarning


def _config(path: Path, folds: Path, run_dir: Path, *, epochs: int, train: str = "train.txt") -> Path:
    config = {
        "seed": 0,
        "data": {"train": str(folds / train), "valid": str(folds / "vali.txt")},
        "transforms": [],
        "model": {"kind": "mlp", "hidden": [128, 128]},
        "loss": {"name": "neural_ndcg"},
        "training": {"epochs": epochs, "batch_size": 4, "list_size": 16, "num_threads": 1},
        "evaluation": {"metrics": ["ndcg@10"]},
        "output": {"run_dir": str(run_dir)},
    }
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.parametrize(("command", "hint"), [
    ("train", "; continue with the same command and --resume"),
    ("experiment", "; run the same command again: finished runs are kept, interrupted ones resume"),
    ("evaluate", ""),
])
def test_ctrl_c_is_one_line_with_what_to_do_next(command, hint, capsys, monkeypatch):
    import importlib

    def interrupted(_args):
        raise KeyboardInterrupt

    monkeypatch.setattr(importlib.import_module(f"smoothrank.cli.{command}"), "run", interrupted)
    argv = {"train": ["train", "c.yaml"], "experiment": ["experiment", "s.yaml", "--out", "o"],
            "evaluate": ["evaluate", "--data", "d", "--predictions", "p"]}[command]
    assert main(argv) == 130
    assert capsys.readouterr().err == f"smoothrank: interrupted{hint}\n"


def test_sigterm_handler_is_restored_after_a_command(monkeypatch):
    # The CLI turns SIGTERM into an interrupt while a command runs, and only then: code that calls
    # main() from Python keeps its own handler afterwards.
    import smoothrank.cli.losses as losses_cli

    seen = []
    monkeypatch.setattr(losses_cli, "run", lambda _args: seen.append(signal.getsignal(signal.SIGTERM)) or 0)
    before = signal.getsignal(signal.SIGTERM)
    assert main(["losses"]) == 0
    assert signal.getsignal(signal.SIGTERM) is before and seen[0] is not before


def test_smoothrank_warnings_are_one_line_and_others_keep_their_form(capsys, monkeypatch):
    import smoothrank.cli.losses as losses_cli

    def warn(_args):
        warnings.warn("the data cannot teach", SmoothrankWarning, stacklevel=1)
        warnings.warn("a library speaks", DeprecationWarning, stacklevel=1)
        return 0

    monkeypatch.setattr(losses_cli, "run", warn)
    shown_as_before: list[type[Warning]] = []
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.showwarning = lambda message, category, *rest: shown_as_before.append(category)
        assert main(["losses"]) == 0
    err = capsys.readouterr().err
    assert err == "smoothrank: warning: the data cannot teach\n"
    assert shown_as_before == [DeprecationWarning]


def test_a_training_split_that_cannot_teach_warns_in_one_line(tmp_path, capsys):
    folds = write_synthetic_folds(tmp_path, seed=0, queries=(6, 3, 3), docs=5)
    zero = folds / "zero.txt"
    zero.write_text("".join("0" + line[1:] + "\n" for line in (folds / "train.txt").read_text().splitlines()))
    config = _config(tmp_path / "c.yaml", folds, tmp_path / "run", epochs=1, train="zero.txt")
    assert main(["train", str(config), "--quiet"]) == 0
    err = capsys.readouterr().err
    assert f"smoothrank: warning: data.train ({zero}): no query has documents with different labels" in err
    assert "TrainingWarning" not in err and "warnings.warn" not in err


@pytest.mark.parametrize(("signame", "status", "what"), [("SIGINT", 130, "interrupted"),
                                                       ("SIGTERM", 143, "terminated")])
def test_a_signal_during_training_then_resume(tmp_path, signame, status, what):
    # End to end: a real Ctrl-C (or SIGTERM, which used to kill the process on the spot) after the
    # first epoch leaves a run that --resume completes.
    folds = write_synthetic_folds(tmp_path, seed=0, queries=(150, 10, 10), docs=16)
    run_dir = tmp_path / "run"
    config = _config(tmp_path / "c.yaml", folds, run_dir, epochs=6)
    command = [sys.executable, "-m", "smoothrank", "train", str(config), "--quiet"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, env=env, preexec_fn=sigint_as_from_a_terminal)
    deadline = time.monotonic() + 120
    while not (run_dir / "checkpoint.pt").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, "training ended before it could be interrupted"
    proc.send_signal(getattr(signal, signame))
    err = proc.communicate(timeout=120)[1].decode()
    assert proc.returncode == status, err
    assert err.endswith(f"smoothrank: {what}; continue with the same command and --resume\n"), err
    assert "Traceback" not in err and not list(run_dir.glob("*.tmp")) and not (run_dir / "model.pt").exists()
    done = len((run_dir / "metrics.jsonl").read_text().splitlines())
    assert 1 <= done < 6
    resumed = subprocess.run([*command, "--resume"], capture_output=True, env=env, timeout=300)
    assert resumed.returncode == 0, resumed.stderr.decode()
    assert (run_dir / "model.pt").is_file()
    assert len((run_dir / "metrics.jsonl").read_text().splitlines()) == 6


def test_ctrl_c_while_the_command_is_still_importing_is_one_line():
    # main() builds its parser by importing every sub-command (torch among them: seconds). The
    # child's first such import says "ready" and waits there; the interrupt lands in it.
    script = """import importlib, sys, time
import smoothrank.cli as cli
assert "torch" not in sys.modules  # the entry point itself imports nothing heavy
real = importlib.import_module
def importing(name, *args):
    print("ready", flush=True)
    time.sleep(60)
    return real(name, *args)
cli.importlib = type(sys)("importlib_stand_in")
cli.importlib.import_module = importing
sys.exit(cli.main(["losses"]))
"""
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, preexec_fn=sigint_as_from_a_terminal)
    assert child.stdout.readline().strip() == "ready"
    child.send_signal(signal.SIGINT)
    _, err = child.communicate(timeout=120)
    assert "Traceback" not in err, err
    assert err == "smoothrank: interrupted\n"
    assert child.returncode == 130


def test_ctrl_c_during_the_imports_of_main_is_one_line(capsys, monkeypatch):
    import smoothrank.cli as cli

    def importing(_name):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli.importlib, "import_module", importing)
    assert main(["losses"]) == 130
    assert capsys.readouterr().err == "smoothrank: interrupted\n"
