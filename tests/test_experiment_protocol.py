"""The protocol of one experiment run, checked end to end on what a run stores.

Selection reads the validation split only, by the spec's ``select_by``; every split is scored from
the stored scores under the spec's convention; the per-query values kept for the t-test are the
test split's; and a run's fingerprint changes with every setting that changes its result.
These hold on data whose validation and test files have the same shape, where reading the wrong
split would not fail but silently give other numbers.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import write_synthetic_folds

from smoothrank.cli import main as cli_main
from smoothrank.data import load_letor
from smoothrank.experiments import expand, run_experiment, spec_from_dict
from smoothrank.experiments.ensemble import read_scores
from smoothrank.metrics import evaluate_flat, mean_metrics

CONVENTION = "lightgbm"  # not the default letor4: a run scored under the default would show
SELECT_BY = "ndcg@5"  # not metrics[0] (ndcg@1), nor the default ndcg@10; differs between conventions
NEURAL = "synthetic--files--neural_ndcg-linear--seed0"
GBDT = {"lightgbm": "synthetic--files--lightgbm-lambdarank--seed0",
        "xgboost": "synthetic--files--xgboost-rank_ndcg--seed0"}
BLEND = "synthetic--files--blend"


def _spec_dict(root: Path, **extra) -> dict:
    data = {
        "name": "protocol", "convention": CONVENTION, "select_by": SELECT_BY,
        "datasets": [{"name": "synthetic", "train": str(root / "train.txt"), "valid": str(root / "vali.txt"),
                      "test": str(root / "test.txt")}],
        # lr 0.05: the validation metrics move from epoch to epoch, and their best epochs differ
        "neural": {"optimizer": {"name": "adam", "lr": 0.05}, "training": {"epochs": 6, "batch_size": 16,
                                                                          "list_size": 10}},
        "losses": ["neural_ndcg"],
        "models": [{"label": "linear", "kind": "linear"}],
        "gbdt": [{"library": "lightgbm", "objective": "lambdarank", "num_boost_round": 40,
                  "early_stopping_rounds": 5, "params": {"min_data_in_leaf": 5}},
                 {"library": "xgboost", "objective": "rank:ndcg", "num_boost_round": 40,
                  "early_stopping_rounds": 5, "params": {"max_depth": 3}}],
        "blends": [{"label": "blend", "members": ["neural_ndcg-linear", "lightgbm-lambdarank"]}],
    }
    data.update(extra)
    return data


@pytest.fixture(scope="module")
def experiment(tmp_path_factory) -> tuple[Path, Path]:
    """(data folder, output folder) of one finished experiment; validation and test files alike in
    shape (15 queries of 10 documents), different in content."""
    root = write_synthetic_folds(tmp_path_factory.mktemp("data"), seed=3, queries=(40, 15, 15), docs=10,
                                 n_features=5, noise=0.6)
    out = tmp_path_factory.mktemp("out")
    outcome = run_experiment(spec_from_dict(_spec_dict(root)), out)
    assert not outcome.failed and sorted(outcome.ran) == sorted([NEURAL, *GBDT.values()])
    assert outcome.ensembles_built == [BLEND]
    return root, out


def _folder(out: Path, run_id: str) -> Path:
    return out / ("ensembles" if run_id == BLEND else "runs") / run_id


def _result(out: Path, run_id: str) -> dict:
    return json.loads((_folder(out, run_id) / "result.json").read_text())


def _splits(root: Path) -> dict:
    return {"train": load_letor(root / "train.txt"), "valid": load_letor(root / "vali.txt"),
            "test": load_letor(root / "test.txt")}


def _mean(scores: np.ndarray, ds, metric: str) -> float:
    return mean_metrics(evaluate_flat(scores, ds.labels, offsets=ds.offsets, metrics=[metric],
                                      convention=CONVENTION))[metric]


@pytest.mark.parametrize("library", sorted(GBDT))
def test_gbdt_early_stopping_selects_the_best_validation_select_by(experiment, library):
    root, out = experiment
    result = _result(out, GBDT[library])
    key = f"valid_{CONVENTION}_{SELECT_BY}"
    curve = [row[key] for row in result["selection"]["history"]]
    assert len(curve) == result["selection"]["rounds_run"] >= 2
    best = result["selection"]["best_iteration"]
    # XGBoost keeps a custom metric's values to 6 digits.
    assert curve[best - 1] == pytest.approx(max(curve), abs=1e-6)  # the best validation iteration is kept
    # ... and the selected model's validation score is that maximum: the curve was the validation split's.
    assert result["metrics"]["valid"][SELECT_BY] == pytest.approx(max(curve), abs=1e-6)
    scores = read_scores(out / "runs" / GBDT[library] / "scores.npz")
    assert _mean(scores["valid"], _splits(root)["valid"], SELECT_BY) == pytest.approx(max(curve), abs=1e-6)


def test_neural_selection_reads_the_validation_split_by_select_by(experiment):
    _, out = experiment
    result = _result(out, NEURAL)
    lines = (out / "runs" / NEURAL / "train" / "metrics.jsonl").read_text().splitlines()
    log = [json.loads(line) for line in lines]
    curve = [row[f"valid_{SELECT_BY}"] for row in log]
    assert len(curve) == 6
    best = result["selection"]["best_epoch"]
    assert best == int(np.argmax(curve)) + 1  # by select_by, the first maximum
    # (a check with teeth: ndcg@1, the first metric, peaks at another epoch)
    assert int(np.argmax([row["valid_ndcg@1"] for row in log])) + 1 != best
    # The trainer's validation values are those of the validation split, not of another one.
    for metric in ("ndcg@1", "ndcg@10", SELECT_BY):
        assert result["metrics"]["valid"][metric] == pytest.approx(log[best - 1][f"valid_{metric}"], abs=1e-9)


@pytest.mark.parametrize("run_id", [NEURAL, *GBDT.values(), BLEND])
def test_every_split_is_scored_from_its_scores_under_the_spec_convention(experiment, run_id):
    root, out = experiment
    result = _result(out, run_id)
    assert result["convention"] == CONVENTION
    scores = read_scores(_folder(out, run_id) / "scores.npz")
    splits = _splits(root)
    metrics = ["ndcg@1", "ndcg@3", "ndcg@5", "ndcg@10", "map"]
    for name, ds in splits.items():
        expected = mean_metrics(evaluate_flat(scores[name], ds.labels, offsets=ds.offsets, metrics=metrics,
                                              convention=CONVENTION))
        assert result["metrics"][name] == pytest.approx(expected, abs=1e-12), name
    # The per-query values of the t-test are the test split's, query by query.
    test = splits["test"]
    assert result["per_query"]["qids"] == [str(q) for q in test.qids]
    per_query = evaluate_flat(scores["test"], test.labels, offsets=test.offsets, metrics=metrics,
                              convention=CONVENTION)
    for metric in metrics:
        assert np.allclose(result["per_query"][metric], per_query[metric].numpy(), atol=1e-12, equal_nan=True)


@pytest.mark.parametrize("change", [{"convention": "letor4"}, {"select_by": "ndcg@10"}, {"num_threads": 2},
                                    {"metrics": ["ndcg@1", "ndcg@3", "ndcg@5", "ndcg@10", "map", "p@1"]}])
def test_every_result_setting_enters_every_fingerprint(experiment, change):
    root, _ = experiment
    before = {c.run_id: c.fingerprint() for c in expand(spec_from_dict(_spec_dict(root)))}
    after = {c.run_id: c.fingerprint() for c in expand(spec_from_dict(_spec_dict(root, **change)))}
    assert before.keys() == after.keys()
    assert all(before[run_id] != after[run_id] for run_id in before), change


def test_a_dry_run_lists_finished_runs_as_finished(experiment, tmp_path, capsys):
    # A finished neural run keeps its last checkpoint: it is finished, not one to resume.
    root, out = experiment
    assert (out / "runs" / NEURAL / "train" / "checkpoint.pt").is_file()
    spec_path = tmp_path / "protocol.yaml"
    spec_path.write_text(yaml.safe_dump(_spec_dict(root)))
    assert cli_main(["experiment", str(spec_path), "--out", str(out), "--dry-run"]) == 0
    listed = dict(line.split("\t") for line in capsys.readouterr().out.splitlines())
    assert listed == {**{run_id: "finished" for run_id in [NEURAL, *GBDT.values()]}, BLEND: "ensemble, built"}
