"""Refit on training + validation after selection (``refit: true``): the spec checks, the refit
models against independently trained ones, out-of-sample validation scores, resuming, and
``concat_datasets``."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml
from conftest import assert_spec_problems, two_method_spec, write_synthetic_folds

from smoothrank.cli import main as cli_main
from smoothrank.data import Dataset, concat_datasets, load_letor
from smoothrank.errors import SmoothrankError
from smoothrank.experiments import expand, run_experiment, spec_from_dict
from smoothrank.experiments.ensemble import read_scores
from smoothrank.metrics import evaluate_flat, mean_metrics

_NEURAL = "syn--files--neural_ndcg-linear--seed0"
_GBDT = "syn--files--lightgbm-lambdarank--seed0"


@pytest.fixture(scope="module")
def letor_files(tmp_path_factory):
    return write_synthetic_folds(tmp_path_factory.mktemp("letor_refit"), seed=5, queries=(14, 8, 6),
                                 docs=8, n_features=4, noise=0.5)


def _spec(root, **extra) -> dict:
    return two_method_spec(root, **{"name": "tiny_refit", "seeds": [0], **extra})


@pytest.fixture(scope="module")
def both_runs(letor_files, tmp_path_factory):
    """The same tiny grid run with and without refit: ``(refit out, plain out)``."""
    root = tmp_path_factory.mktemp("refit_runs")
    refit_out, plain_out = root / "refit", root / "plain"
    run_experiment(spec_from_dict(_spec(letor_files, refit=True)), refit_out)
    run_experiment(spec_from_dict(_spec(letor_files)), plain_out)
    return refit_out, plain_out


def _result(out, run_id) -> dict:
    return json.loads((out / "runs" / run_id / "result.json").read_text())


def _splits(root) -> dict[str, Dataset]:
    return {name: load_letor(root / f"{file}.txt", n_features=4)
            for name, file in (("train", "train"), ("valid", "vali"), ("test", "test"))}


# ------------------------------------------------------------------------------ the spec
def test_refit_is_off_by_default_and_leaves_fingerprints_alone(letor_files):
    plain = expand(spec_from_dict(_spec(letor_files)))
    explicit = expand(spec_from_dict(_spec(letor_files, refit=False)))
    refit = expand(spec_from_dict(_spec(letor_files, refit=True)))
    assert all("refit" not in c.settings for c in plain)
    assert [c.fingerprint() for c in plain] == [c.fingerprint() for c in explicit]
    assert all(c.settings["refit"] is True for c in refit)
    assert not {c.fingerprint() for c in plain} & {c.fingerprint() for c in refit}


def test_refit_needs_a_validation_split(letor_files):
    data = _spec(letor_files, refit=True)
    del data["datasets"][0]["valid"]
    for g in data["gbdt"]:
        g["early_stopping_rounds"] = None
    assert_spec_problems(data, ["refit: datasets.0 (syn) has no validation split"], source="refit.yaml")


def test_refit_refuses_the_test_file_as_validation(letor_files):
    # The LightGBM example validates on its test file; a refit would train on the test queries.
    data = _spec(letor_files, refit=True)
    data["datasets"][0]["valid"] = data["datasets"][0]["test"]
    assert_spec_problems(data, ["refit: datasets.0 (syn) uses its test file as the validation split"])


# ------------------------------------------------------------------------------ the runs
def test_validation_scores_stay_out_of_sample(both_runs):
    refit_out, plain_out = both_runs
    for run_id in (_NEURAL, _GBDT):
        refit, plain = _result(refit_out, run_id), _result(plain_out, run_id)
        # Selection is untouched: same validation scores and metrics as the run without refit, and
        # the selected model's own test metrics are kept.
        assert read_scores(refit_out / "runs" / run_id / "scores.npz")["valid"] == pytest.approx(
            read_scores(plain_out / "runs" / run_id / "scores.npz")["valid"], abs=0)
        assert refit["metrics"]["valid"] == plain["metrics"]["valid"]
        assert refit["refit"]["without_refit"]["test"] == pytest.approx(plain["metrics"]["test"], abs=1e-12)
        assert refit["refit"]["train_queries"] == 14 + 8


def test_neural_refit_equals_an_independent_training(both_runs, letor_files, tmp_path):
    from smoothrank.training import load_model, train
    from smoothrank.training.config import config_from_dict

    refit_out, _ = both_runs
    result = _result(refit_out, _NEURAL)
    epochs = result["refit"]["epochs"]
    assert epochs == result["selection"]["best_epoch"] >= 1
    cell = next(c for c in expand(spec_from_dict(_spec(letor_files, refit=True))) if c.run_id == _NEURAL)
    config = dict(cell.settings["config"])
    config["training"] = {**config["training"], "epochs": epochs}
    splits = _splits(letor_files)
    merged = Dataset.from_arrays(np.vstack([splits["train"].features, splits["valid"].features]),
                                 np.r_[splits["train"].labels, splits["valid"].labels],
                                 np.r_[splits["train"].query_of_row(), 1000 + splits["valid"].query_of_row()])
    train(config_from_dict(config), run_dir=tmp_path / "by_hand", quiet=True, splits={"train": merged})
    by_hand = load_model(tmp_path / "by_hand" / "model.pt").score(splits["test"])
    stored = read_scores(refit_out / "runs" / _NEURAL / "scores.npz")["test"]
    np.testing.assert_allclose(stored, by_hand, rtol=1e-6, atol=1e-6)
    selected = read_scores(both_runs[1] / "runs" / _NEURAL / "scores.npz")["test"]
    assert not np.allclose(stored, selected)  # the refit is another model
    want = mean_metrics(evaluate_flat(stored, splits["test"].labels, offsets=splits["test"].offsets,
                                      metrics=list(result["metrics"]["test"]), convention="letor4"))
    assert result["metrics"]["test"] == pytest.approx(want, abs=1e-12)


def test_gbdt_refit_equals_lightgbm_on_the_merged_data(both_runs, letor_files):
    lgb = pytest.importorskip("lightgbm")
    refit_out, plain_out = both_runs
    result = _result(refit_out, _GBDT)
    rounds = result["refit"]["rounds"]
    assert rounds == _result(plain_out, _GBDT)["selection"]["best_iteration"]
    s = _splits(letor_files)
    x = np.vstack([s["train"].features, s["valid"].features])
    y = np.r_[s["train"].labels, s["valid"].labels]
    groups = np.r_[s["train"].list_sizes, s["valid"].list_sizes]
    params = {"objective": "lambdarank", "seed": 0, "deterministic": True, "num_threads": 1,
              "verbosity": -1, "min_data_in_leaf": 3}
    booster = lgb.train(params, lgb.Dataset(x, label=y, group=groups), num_boost_round=rounds)
    stored = read_scores(refit_out / "runs" / _GBDT / "scores.npz")
    np.testing.assert_allclose(stored["test"], booster.predict(s["test"].features), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(stored["train"], booster.predict(s["train"].features), rtol=1e-9, atol=1e-12)


def test_refit_resumes_and_reports(both_runs, letor_files, tmp_path, capsys):
    refit_out, _ = both_runs
    spec_path = tmp_path / "refit.yaml"
    spec_path.write_text(yaml.safe_dump(_spec(letor_files, refit=True)))
    before = read_scores(refit_out / "runs" / _NEURAL / "scores.npz")["test"]
    (refit_out / "runs" / _NEURAL / "result.json").unlink()  # interrupted after both trainings
    assert cli_main(["experiment", str(spec_path), "--out", str(refit_out), "--quiet"]) == 0
    assert "1 run(s) done, 1 skipped" in capsys.readouterr().out
    assert read_scores(refit_out / "runs" / _NEURAL / "scores.npz")["test"] == pytest.approx(before, abs=0)
    assert "Refit: after selection, every run was retrained" in (refit_out / "summary.md").read_text()


def test_a_learned_blend_refuses_the_test_file_as_validation(letor_files):
    # A review found the weights fit on the test queries without a word (refit was refused already).
    members = ["neural_ndcg-linear", "lightgbm-lambdarank"]
    data = _spec(letor_files, blends=[{"label": "stack", "members": members, "weights": "learned"}])
    data["datasets"][0]["valid"] = data["datasets"][0]["test"]
    assert_spec_problems(data, ["blends: datasets.0 (syn) uses its test file as the validation split; a "
                                "learned blend would fit its weights on the test queries"])


def test_a_refit_run_without_scores_is_rescored_from_its_refit_model(both_runs, letor_files, tmp_path):
    # Runs finished before runs kept scores.npz are re-scored from their models; a refit run's training
    # and test scores are the refit model's (a review found the selected model used, and the run
    # then called damaged).
    import shutil

    from smoothrank.experiments.ensemble import member_scores

    refit_out, _ = both_runs
    out = tmp_path / "copy"
    shutil.copytree(refit_out, out)
    kept = read_scores(out / "runs" / _NEURAL / "scores.npz")
    (out / "runs" / _NEURAL / "scores.npz").unlink()
    (cell,) = [c for c in expand(spec_from_dict(_spec(letor_files, refit=True))) if c.run_id == _NEURAL]
    again = member_scores(cell, out, _splits(letor_files), _result(out, _NEURAL))
    for name in ("train", "valid", "test"):
        np.testing.assert_allclose(again[name], kept[name], rtol=1e-6)


def test_refit_with_ensembles_and_a_learned_blend(letor_files, tmp_path):
    members = ["neural_ndcg-linear", "lightgbm-lambdarank"]
    data = _spec(letor_files, refit=True, seeds=[0, 1], ensemble=True,
                 blends=[{"label": "stack", "members": members, "weights": "learned", "learner": {"cv": 3}}])
    outcome = run_experiment(spec_from_dict(data), tmp_path / "out")
    assert not outcome.failed and len(outcome.ensembles_built) == 3
    assert all("refit" in r for r in outcome.results if r["kind"] != "ensemble")


# ------------------------------------------------------------------------------ concat_datasets
def test_concat_datasets_keeps_queries_rows_and_lines(letor_files):
    s = _splits(letor_files)
    merged = concat_datasets([s["train"], s["valid"]])
    assert merged.n_queries == s["train"].n_queries + s["valid"].n_queries
    assert list(merged.qids) == [*s["train"].qids, *s["valid"].qids]
    for q in range(merged.n_queries):
        part, k = (s["train"], q) if q < s["train"].n_queries else (s["valid"], q - s["train"].n_queries)
        np.testing.assert_array_equal(merged.query(q)[0], part.query(k)[0])
        np.testing.assert_array_equal(merged.query(q)[1], part.query(k)[1])
    lines = np.r_[s["train"].line_numbers, s["valid"].line_numbers]
    np.testing.assert_array_equal(merged.line_numbers, lines)
    assert merged.source == f"{s['train'].source} + {s['valid'].source}"


def test_concat_datasets_errors(letor_files):
    s = _splits(letor_files)
    with pytest.raises(SmoothrankError, match="no datasets"):
        concat_datasets([])
    narrow = s["valid"].with_features(s["valid"].features[:, :2])
    with pytest.raises(SmoothrankError, match="different numbers of features"):
        concat_datasets([s["train"], narrow])


def test_concat_datasets_never_merges_a_query_id_across_parts(letor_files):
    # The same qid in two parts (a document-level split, or per-file .query numbering) stays
    # two lists, as each part gave them to training.
    train = _splits(letor_files)["train"]
    twice = concat_datasets([train, train])
    assert twice.n_queries == 2 * train.n_queries
    assert list(twice.qids) == [*train.qids, *train.qids]
    np.testing.assert_array_equal(twice.list_sizes, np.r_[train.list_sizes, train.list_sizes])
