"""``smoothrank experiment SPEC --reuse DIR``: finished runs of another folder with the same run id
and fingerprint are copied in, not run again; runs of other settings are left alone; a refit spec
takes a plain run's selection training; the folder's own runs are never replaced."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import two_method_spec, write_synthetic_folds

from smoothrank.cli import main as cli_main
from smoothrank.experiments.ensemble import read_scores

_NEURAL = "syn--files--neural_ndcg-linear--seed{}"
_GBDT = "syn--files--lightgbm-lambdarank--seed{}"


@pytest.fixture(scope="module")
def letor_files(tmp_path_factory):
    return write_synthetic_folds(tmp_path_factory.mktemp("letor_reuse"), seed=7, queries=(14, 8, 6),
                                 docs=8, n_features=4, noise=0.5)


def _spec_file(path, letor_files, **extra):
    path.write_text(yaml.safe_dump(two_method_spec(letor_files, **extra)))
    return str(path)


@pytest.fixture(scope="module")
def source(letor_files, tmp_path_factory):
    """A finished experiment of seed 0 only: the folder other experiments reuse from."""
    root = tmp_path_factory.mktemp("reuse_source")
    spec = _spec_file(root / "source.yaml", letor_files, seeds=[0])
    assert cli_main(["experiment", spec, "--out", str(root / "out"), "--quiet"]) == 0
    return root / "out"


def _result(out, run_id):
    return (out / "runs" / run_id / "result.json").read_bytes()


def test_runs_of_the_same_fingerprint_are_copied_the_rest_run(letor_files, source, tmp_path, capsys):
    spec = _spec_file(tmp_path / "spec.yaml", letor_files)  # seeds 0 and 1
    out = tmp_path / "out"
    assert cli_main(["experiment", spec, "--out", str(out), "--reuse", str(source)]) == 0
    captured = capsys.readouterr()
    assert f"reused from {source}: 2 finished run(s), 0 selection training(s)" in captured.err
    assert "2 run(s) done, 2 skipped (finished before)" in captured.out
    for run_id in (_NEURAL.format(0), _GBDT.format(0)):  # the very same runs, not new ones
        assert _result(out, run_id) == _result(source, run_id)
    assert (out / "runs" / _NEURAL.format(0) / "train" / "model.pt").is_file()
    for run_id in (_NEURAL.format(1), _GBDT.format(1)):
        assert json.loads(_result(out, run_id))["seed"] == 1
    assert not list((out / "runs").glob(".reuse-*"))
    # A second command finds everything finished and reuses nothing.
    assert cli_main(["experiment", spec, "--out", str(out), "--reuse", str(source)]) == 0
    captured = capsys.readouterr()
    assert "reused from" not in captured.err and "0 run(s) done, 4 skipped" in captured.out


def test_runs_of_other_settings_are_left_alone(letor_files, source, tmp_path, capsys):
    # Same run ids, other epochs: copying the folder by hand would be refused as stale results;
    # --reuse takes only the LightGBM runs, whose settings did not change, and runs the rest.
    spec = _spec_file(tmp_path / "spec.yaml", letor_files, seeds=[0],
                      neural={"training": {"epochs": 3, "batch_size": 8, "list_size": 8}})
    out = tmp_path / "out"
    assert cli_main(["experiment", spec, "--out", str(out), "--reuse", str(source)]) == 0
    captured = capsys.readouterr()
    assert "1 finished run(s), 0 selection training(s)" in captured.err
    assert "1 run(s) done, 1 skipped" in captured.out
    assert _result(out, _GBDT.format(0)) == _result(source, _GBDT.format(0))
    assert json.loads(_result(out, _NEURAL.format(0)))["selection"]["epochs_run"] == 3


def test_a_refit_spec_takes_the_selection_training_and_computes_the_refit(letor_files, source, tmp_path,
                                                                          capsys):
    spec = _spec_file(tmp_path / "spec.yaml", letor_files, seeds=[0], refit=True)
    assert cli_main(["experiment", spec, "--out", str(tmp_path / "fresh"), "--quiet"]) == 0
    out = tmp_path / "out"
    assert cli_main(["experiment", spec, "--out", str(out), "--reuse", str(source)]) == 0
    captured = capsys.readouterr()
    assert "0 finished run(s), 1 selection training(s)" in captured.err  # GBDT refit runs are not reused
    assert "2 run(s) done, 0 skipped" in captured.out
    reused = json.loads(_result(out, _NEURAL.format(0)))
    assert reused["selection"]["resumed"] is True  # the selection training was not redone
    fresh = json.loads(_result(tmp_path / "fresh", _NEURAL.format(0)))
    assert reused["refit"] == fresh["refit"] and reused["metrics"] == fresh["metrics"]
    scores = [read_scores(folder / "runs" / _NEURAL.format(0) / "scores.npz")
              for folder in (out, tmp_path / "fresh")]
    for split in ("train", "valid", "test"):
        np.testing.assert_array_equal(scores[0][split], scores[1][split])


def test_the_folders_own_runs_are_never_replaced(letor_files, source, tmp_path, capsys):
    spec = _spec_file(tmp_path / "spec.yaml", letor_files, seeds=[0])
    out = tmp_path / "out"
    shutil.copytree(source / "runs" / _GBDT.format(0), out / "runs" / _GBDT.format(0))
    result = out / "runs" / _GBDT.format(0) / "result.json"
    own = json.loads(result.read_text())
    own["seconds"] = 12345.0  # marks this copy as the folder's own
    result.write_text(json.dumps(own))
    assert cli_main(["experiment", spec, "--out", str(out), "--reuse", str(source), "--quiet"]) == 0
    assert json.loads(result.read_text())["seconds"] == 12345.0
    assert "0 run(s) done, 2 skipped" in capsys.readouterr().out


@pytest.mark.parametrize("damage", ["not json", "no fingerprint"])
def test_damaged_source_runs_are_skipped(letor_files, source, tmp_path, capsys, damage):
    damaged = tmp_path / "damaged"
    shutil.copytree(source, damaged)
    path = damaged / "runs" / _GBDT.format(0) / "result.json"
    if damage == "not json":
        path.write_text("{not json")
    else:  # a result the runner reads, but without the fingerprint that --reuse compares
        result = json.loads(path.read_text())
        del result["fingerprint"]
        path.write_text(json.dumps(result))
    spec = _spec_file(tmp_path / "spec.yaml", letor_files, seeds=[0])
    out = tmp_path / "out"
    argv = ["experiment", spec, "--out", str(out), "--reuse", str(damaged), "--quiet"]
    for extra in (["--dry-run"], []):
        assert cli_main([*argv, *extra]) == 0
    assert "1 run(s) done, 1 skipped" in capsys.readouterr().out
    assert json.loads(_result(out, _GBDT.format(0)))["fingerprint"]


def test_a_run_that_cannot_be_copied_is_made_instead(letor_files, source, tmp_path, capsys):
    broken = tmp_path / "broken"
    shutil.copytree(source, broken)
    (broken / "runs" / _GBDT.format(0) / "extra").symlink_to(tmp_path / "nowhere")  # dangling
    spec = _spec_file(tmp_path / "spec.yaml", letor_files, seeds=[0])
    out = tmp_path / "out"
    assert cli_main(["experiment", spec, "--out", str(out), "--reuse", str(broken), "--quiet"]) == 0
    captured = capsys.readouterr()
    assert re.search(r"warning: --reuse: could not copy .*; the run is made instead", captured.err)
    assert "1 run(s) done, 1 skipped" in captured.out  # the LightGBM run is made, the other one reused
    assert not (out / "runs" / _GBDT.format(0) / "extra").exists()
    assert not (out / ".reuse-staging").exists()


def test_a_killed_copy_leaves_nothing_that_readers_of_runs_see(letor_files, source, tmp_path):
    from smoothrank.experiments import load_results

    out = tmp_path / "out"
    left = out / ".reuse-staging" / _GBDT.format(0)  # what a copy killed by SIGKILL leaves behind
    shutil.copytree(source / "runs" / _GBDT.format(0), left)
    (out / "runs").mkdir()
    assert load_results(out) == []
    spec = _spec_file(tmp_path / "spec.yaml", letor_files, seeds=[0])
    assert cli_main(["experiment", spec, "--out", str(out), "--reuse", str(source), "--quiet"]) == 0
    assert not (out / ".reuse-staging").exists()
    assert sorted(r["run_id"] for r in load_results(out)) == sorted([_GBDT.format(0), _NEURAL.format(0)])


def test_a_finished_run_comes_before_a_selection_training_then_the_first_folder(letor_files, source, tmp_path,
                                                                               capsys):
    refit_spec = _spec_file(tmp_path / "refit.yaml", letor_files, seeds=[0], refit=True)
    finished_refit = tmp_path / "finished_refit"
    assert cli_main(["experiment", refit_spec, "--out", str(finished_refit), "--quiet"]) == 0
    marked = tmp_path / "marked"  # the same finished refit runs, marked
    shutil.copytree(finished_refit, marked)
    for run_id in (_GBDT.format(0), _NEURAL.format(0)):
        result = json.loads(_result(marked, run_id))
        result["seconds"] = 54321.0
        (marked / "runs" / run_id / "result.json").write_text(json.dumps(result))
    capsys.readouterr()
    out = tmp_path / "out"
    # source lends only a selection training; marked and finished_refit have the finished runs
    argv = ["experiment", refit_spec, "--out", str(out), "--quiet"]
    sources = [str(source), str(marked), str(finished_refit)]
    assert cli_main([*argv, *(arg for folder in sources for arg in ("--reuse", folder))]) == 0
    assert "0 run(s) done, 2 skipped" in capsys.readouterr().out
    for run_id in (_GBDT.format(0), _NEURAL.format(0)):
        assert json.loads(_result(out, run_id))["seconds"] == 54321.0


def test_dry_run_says_what_would_be_reused_and_writes_nothing(letor_files, source, tmp_path, capsys):
    spec = _spec_file(tmp_path / "spec.yaml", letor_files, refit=True)
    out = tmp_path / "out"
    assert cli_main(["experiment", spec, "--out", str(out), "--reuse", str(source), "--dry-run"]) == 0
    lines = dict(line.split("\t") for line in capsys.readouterr().out.splitlines())
    assert lines[_NEURAL.format(0)] == f"to run (the refit only; selection training reused from {source})"
    assert lines[_NEURAL.format(1)] == lines[_GBDT.format(0)] == "to run"
    assert not out.exists()
    spec = _spec_file(tmp_path / "plain.yaml", letor_files)
    assert cli_main(["experiment", spec, "--out", str(out), "--reuse", str(source), "--dry-run"]) == 0
    lines = dict(line.split("\t") for line in capsys.readouterr().out.splitlines())
    assert lines[_GBDT.format(0)] == f"finished (reused from {source})"
    assert not out.exists()


@pytest.mark.parametrize("make, message", [
    (lambda p: p / "missing", "--reuse {dir}: no such folder"),
    (lambda p: p, "--reuse {dir}: not an experiment output folder (it has no runs/ folder)"),
])
def test_a_reuse_folder_that_is_not_an_experiment_is_an_error(letor_files, tmp_path, capsys, make, message):
    folder = make(tmp_path / "src")
    (tmp_path / "src").mkdir()
    spec = _spec_file(tmp_path / "spec.yaml", letor_files, seeds=[0])
    out = tmp_path / "out"
    for extra in ([], ["--dry-run"]):
        assert cli_main(["experiment", spec, "--out", str(out), "--reuse", str(folder), *extra]) == 2
        err = capsys.readouterr().err
        assert err.startswith("smoothrank: error: ") and message.format(dir=folder) in err, err
    assert not out.exists()


def test_an_empty_reuse_path_is_an_error(letor_files, tmp_path, capsys):
    spec = _spec_file(tmp_path / "spec.yaml", letor_files, seeds=[0])
    assert cli_main(["experiment", spec, "--out", str(tmp_path / "out"), "--reuse", " "]) == 2
    assert "--reuse: expected a folder path, got an empty one" in capsys.readouterr().err


# ------------------------------------------------------------------------------ experiments/reproduce.sh
_ROOT = Path(__file__).resolve().parent.parent


def _script_list(name: str) -> list[str]:
    text = (_ROOT / "experiments" / "reproduce.sh").read_text()
    return re.search(rf"^{name}=\((.*?)\)", text, re.S | re.M).group(1).split()


def test_reproduce_script_lists_every_spec_in_the_order_of_results_md():
    order, left_out = _script_list("ORDER"), _script_list("NOT_IN_ORDER")
    assert sorted(order + left_out) == sorted(p.stem for p in (_ROOT / "experiments").glob("*.yaml"))
    results = (_ROOT / "docs" / "RESULTS.md").read_text()
    # An experiment comes after those whose runs it reuses, as in RESULTS.md's order of commands.
    positions = [re.search(rf"smoothrank experiment\s+experiments/{name}\.yaml", results).start()
                 for name in order]
    assert positions == sorted(positions)


def test_reproduce_script_refuses_an_unknown_spec_before_running_anything(tmp_path):
    script = str(_ROOT / "experiments" / "reproduce.sh")
    done = subprocess.run(["bash", script, "mq2008_blend", "no_such_spec"],
                          env={**os.environ, "OUT": str(tmp_path / "out")}, capture_output=True, text=True)
    assert done.returncode == 2 and "no spec experiments/no_such_spec.yaml" in done.stderr
    assert not (tmp_path / "out").exists()
