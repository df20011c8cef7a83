"""experiments/run_diff.py: two output folders of one experiment, compared run by run."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from conftest import load_experiment_script, write_synthetic_folds

from smoothrank.experiments import run_experiment, spec_from_dict


@pytest.fixture(scope="module")
def run_diff():
    return load_experiment_script("run_diff")


@pytest.fixture(scope="module")
def twice(tmp_path_factory) -> tuple[Path, Path]:
    """One tiny experiment (a linear scorer and LightGBM) run twice from scratch, in two folders."""
    root = tmp_path_factory.mktemp("diff")
    data = write_synthetic_folds(root, seed=1, queries=(30, 10, 10), docs=8, n_features=4, noise=0.3)
    spec = spec_from_dict({
        "name": "diff", "convention": "letor4", "seeds": [0],
        "datasets": [{"name": "synthetic", "train": str(data / "train.txt"), "valid": str(data / "vali.txt"),
                      "test": str(data / "test.txt")}],
        "neural": {"training": {"epochs": 3, "batch_size": 8, "list_size": 8}},
        "losses": ["list_mle"], "models": [{"label": "linear", "kind": "linear"}],
        "gbdt": [{"library": "lightgbm", "objective": "lambdarank", "num_boost_round": 10,
                  "early_stopping_rounds": 5, "params": {"min_data_in_leaf": 5}}],
    })
    run_experiment(spec, root / "a")
    run_experiment(spec, root / "b")
    return root / "a", root / "b"


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_the_same_spec_run_twice_is_identical_run_by_run(run_diff, twice, capsys):
    assert run_diff.main([str(twice[0]), str(twice[1])]) == 0
    out = capsys.readouterr().out
    assert "2 of 2 run(s) identical" in out
    assert "| synthetic | - | list_mle-linear | 0 |" in out and "| 0 of 10 | yes |" in out


def test_a_changed_query_value_is_found_and_counted(run_diff, twice, tmp_path, capsys):
    b = _copy(twice[1], tmp_path / "b")
    path = next(p for p in (b / "runs").glob("*/result.json") if "lambdarank" in p.parent.name)
    result = json.loads(path.read_text())
    result["per_query"]["ndcg@3"][4] += 0.25
    path.write_text(json.dumps(result))
    assert run_diff.main([str(twice[0]), str(b)]) == 1
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if "lightgbm-lambdarank" in line)
    assert row.endswith("| 0.25 | 1 of 10 | no |")
    assert "1 of 2 run(s) identical" in out


def test_a_run_on_one_side_only_is_reported(run_diff, twice, tmp_path, capsys):
    b = _copy(twice[1], tmp_path / "b")
    shutil.rmtree(next(p.parent for p in (b / "runs").glob("*/result.json") if "list_mle" in p.parent.name))
    assert run_diff.main([str(twice[0]), str(b)]) == 1
    assert "| only in A | - | - | no |" in capsys.readouterr().out


def test_a_folder_without_runs_is_refused_by_name(run_diff, twice, tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        run_diff.main([str(twice[0]), str(tmp_path / "missing")])
    assert info.value.code == 2
    assert f"{tmp_path / 'missing'}: no runs/ folder" in capsys.readouterr().err


def test_a_damaged_result_or_no_run_at_all_is_exit_status_2_not_a_difference(run_diff, twice, tmp_path,
                                                                               capsys):
    # A review found a traceback and exit 1 (the status of a real difference) for a damaged file,
    # and exit 0 ("identical") for two folders without a finished run.
    a, _ = twice
    broken = _copy(a, tmp_path / "broken")
    damaged = next(broken.glob("runs/*/result.json"))
    damaged.write_text("{")
    with pytest.raises(SystemExit) as info:
        run_diff.main([str(a), str(broken)])
    assert info.value.code == 2 and f"{damaged}: not valid JSON" in capsys.readouterr().err
    for name in ("empty_a", "empty_b"):
        (tmp_path / name / "runs").mkdir(parents=True)
    with pytest.raises(SystemExit) as info:
        run_diff.main([str(tmp_path / "empty_a"), str(tmp_path / "empty_b")])
    assert info.value.code == 2 and "nothing to compare" in capsys.readouterr().err


def test_ensembles_without_seed_or_selection_are_compared_by_their_query_values(run_diff):
    def result(values, seed=None):
        return {"dataset": "d", "fold": 1, "method": "m+ens5", "seed": seed,
                "per_query": {"qids": ["1", "2"], "ndcg@1": values}}

    def diff(a, b):
        return run_diff.diff_table(run_diff.index_runs([result(a)]), run_diff.index_runs([result(b)]))

    same = diff([1.0, 0.5], [1.0, 0.5])
    assert same[1:] == (1, 1) and "| d | 1 | m+ens5 | - | - / - | 0 | 0 of 2 | yes |" in same[0]
    moved = diff([1.0, 0.5], [0.0, 0.5])
    assert moved[1:] == (0, 1) and "| 1 | 1 of 2 | no |" in moved[0]
