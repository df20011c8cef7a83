"""Experiment runner: spec validation, GBDT baselines, resumability, t-test, reports."""

from __future__ import annotations

import csv
import io
import json
import math
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from conftest import write_synthetic_folds

from smoothrank.cli import main as cli_main
from smoothrank.data import load_letor
from smoothrank.errors import ConfigError, SmoothrankError
from smoothrank.experiments import (
    adjust_pvalues,
    expand,
    fold_mean_standard_error,
    load_results,
    load_spec,
    mean_std,
    paired_ttest,
    run_experiment,
    spec_from_dict,
    summarize,
)
from smoothrank.experiments.gbdt import fit_gbdt
from smoothrank.experiments.report import (
    TARGET_METRICS,
    compare_methods,
    format_csv,
    format_markdown,
    published_comparison,
    write_reports,
)
from smoothrank.experiments.runner import write_json
from smoothrank.metrics import evaluate_flat, mean_metrics


# ------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def letor_files(tmp_path_factory) -> Path:
    return write_synthetic_folds(tmp_path_factory.mktemp("letor"), seed=0, queries=(40, 15, 15), docs=10,
                                 n_features=5, noise=0.3)


def _spec_dict(root: Path, **extra) -> dict:
    data = {
        "name": "tiny",
        "convention": "letor4",
        "baseline": "lightgbm-lambdarank",
        "datasets": [{"name": "synthetic", "train": str(root / "train.txt"), "valid": str(root / "vali.txt"),
                      "test": str(root / "test.txt")}],
        "neural": {"training": {"epochs": 2, "batch_size": 16, "list_size": 10}},
        "losses": ["neural_ndcg"],
        "models": [{"label": "linear", "kind": "linear"}],
        "gbdt": [{"library": "lightgbm", "objective": "lambdarank", "num_boost_round": 15,
                  "early_stopping_rounds": 5, "params": {"min_data_in_leaf": 5}}],
    }
    data.update(extra)
    return data


# ------------------------------------------------------------------------------ spec
@pytest.mark.parametrize("device", ["cuda", "meta", "nodevice"])
def test_a_device_this_machine_cannot_use_is_refused_before_anything_is_written(letor_files, tmp_path,
                                                                                 device, capsys):
    # Accepted, then every run failed in turn ("training.device: 'cuda' requested but CUDA is not
    # available") after spec.yaml, plan.json and empty summaries were written.
    if device == "cuda" and torch.cuda.is_available():
        pytest.skip("this machine can use cuda")
    spec = _spec_dict(letor_files, neural={"training": {"epochs": 1, "device": device}}, gbdt=[],
                      baseline=None)
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    for dry in ([], ["--dry-run"]):
        assert cli_main(["experiment", str(path), "--out", str(tmp_path / "out"), *dry]) == 2
        err = capsys.readouterr().err
        assert "neural.training.device" in err and "a run still to do would fail" in err, err
        assert "Traceback" not in err and not (tmp_path / "out").exists()


def test_a_loss_that_switches_schedule_may_inherit_the_shared_schedules_options(letor_files):
    # A review: a shared {name: step, step_size: 10} with one loss switching to softrank (or a grid
    # over the name) was refused after the schedule check was added; it had loaded before.
    shared = {"schedule": {"name": "step", "step_size": 10}, "training": {"epochs": 2}}
    losses = ["list_net",
              {"name": "rank_net", "label": "rn-soft", "overrides": {"schedule": {"name": "softrank"}}},
              {"name": "rank_net", "label": "rn-grid", "grid": {"overrides.schedule.name": ["step", "none"]}}]
    spec = spec_from_dict(_spec_dict(letor_files, neural=shared, losses=losses, gbdt=[], baseline=None))
    names = sorted(c.settings["config"]["schedule"]["name"] for c in expand(spec))
    assert names == ["none", "softrank", "step", "step"]
    # an option the loss's own override sets for another schedule is still refused
    own = [{"name": "rank_net", "overrides": {"schedule": {"name": "softrank", "gamma": 0.5}}}]
    with pytest.raises(ConfigError, match=r"schedule: gamma: only the step schedule takes it, not 'softrank"):
        spec_from_dict(_spec_dict(letor_files, neural=shared, losses=own, gbdt=[], baseline=None))
    # ... also at the shared value, and a shared option no schedule of the shared settings used
    again = [{"name": "rank_net", "overrides": {"schedule": {"name": "softrank", "step_size": 10}}}]
    with pytest.raises(ConfigError, match=r"schedule: step_size: only the step schedule"):
        spec_from_dict(_spec_dict(letor_files, neural=shared, losses=again, gbdt=[], baseline=None))
    unused = {"schedule": {"name": "none", "step_size": 10}, "training": {"epochs": 2}}
    switch = [{"name": "rank_net", "overrides": {"schedule": {"name": "softrank"}}}]
    with pytest.raises(ConfigError, match=r"schedule: step_size: only the step schedule"):
        spec_from_dict(_spec_dict(letor_files, neural=unused, losses=switch, gbdt=[], baseline=None))


def test_spec_expands_grid(letor_files):
    spec = spec_from_dict(_spec_dict(letor_files, seeds=[0, 1]))
    cells = expand(spec)
    assert [c.method for c in cells] == ["neural_ndcg-linear"] * 2 + ["lightgbm-lambdarank"] * 2
    assert len({c.run_id for c in cells}) == 4
    assert len({c.fingerprint() for c in cells}) == 4
    mq = spec_from_dict({**_spec_dict(letor_files),
                         "datasets": [{"name": "mq2008", "mq2008_folds": [1, 2, 3]}]})
    assert sorted({c.fold for c in expand(mq)}) == [1, 2, 3]
    assert expand(mq)[0].settings["config"]["data"] == {"mq2008_fold": 1}


def test_gbdt_grid_expands_to_the_methods_written_out(letor_files):
    # A grid is shorthand: its methods' cells (settings, run ids, fingerprints) are those of the same
    # methods written out as items, so written-out runs carry over to a grid spec and back.
    item = {"library": "lightgbm", "objective": "lambdarank", "num_boost_round": 15,
            "early_stopping_rounds": 5, "params": {"learning_rate": 0.1}}
    grid = spec_from_dict(_spec_dict(letor_files, seeds=[0, 1], gbdt=[
        {**item, "grid": {"num_leaves": [3, 7], "min_data_in_leaf": [5, 10, 20]}}], baseline=None))
    labels = [f"lightgbm-lambdarank-num_leaves{n}-min_data_in_leaf{m}" for n in (3, 7) for m in (5, 10, 20)]
    written = spec_from_dict(_spec_dict(letor_files, seeds=[0, 1], baseline=None, gbdt=[
        {**item, "label": label, "params": {"learning_rate": 0.1, "num_leaves": n, "min_data_in_leaf": m}}
        for label, (n, m) in zip(labels, [(n, m) for n in (3, 7) for m in (5, 10, 20)], strict=True)]))
    assert grid.method_labels() == written.method_labels() == ["neural_ndcg-linear", *labels]
    a, b = expand(grid), expand(written)
    assert [c.run_id for c in a] == [c.run_id for c in b] and len(a) == 2 * 7
    assert [c.fingerprint() for c in a] == [c.fingerprint() for c in b]
    assert "grid" not in a[-1].settings["gbdt"]
    # A spec without a grid keeps the cells it had before grids existed (no "grid" key anywhere).
    plain = expand(spec_from_dict(_spec_dict(letor_files)))
    assert all("grid" not in c.settings.get("gbdt", {}) for c in plain)


def test_grid_methods_train_and_can_be_the_baseline(letor_files, tmp_path):
    item = {"library": "lightgbm", "objective": "lambdarank", "num_boost_round": 5,
            "early_stopping_rounds": None, "params": {"min_data_in_leaf": 5}, "grid": {"num_leaves": [3, 15]}}
    loss = {"name": "list_net", "grid": {"overrides.optimizer.lr": [0.0001, 0.1]}}
    spec = spec_from_dict(_spec_dict(letor_files, losses=[loss], gbdt=[item],
                                     baseline="lightgbm-lambdarank-num_leaves3"))
    out = run_experiment(spec, tmp_path / "out")
    metrics = {r["method"]: json.dumps(r["metrics"], sort_keys=True) for r in out.results}
    assert sorted(metrics) == ["lightgbm-lambdarank-num_leaves15", "lightgbm-lambdarank-num_leaves3",
                               "list_net-lr0.0001-linear", "list_net-lr0.1-linear"]
    assert len(set(metrics.values())) == 4  # four different models


@pytest.mark.parametrize(("grid", "params", "fragment"), [
    ({"num_leaves": [3, 7]}, {"num_leaves": 5}, "gbdt.0.grid.num_leaves: also set in params"),
    ({"num_leaves": [3, 3]}, {}, "gbdt.0.grid.num_leaves: values that give the same label text ['3']"),
    ({"foo bar": [1]}, {}, "gbdt.0.grid.'foo bar': not a booster parameter name"),
    ({"": [1, 2]}, {}, "gbdt.0.grid.'': not a booster parameter name"),
    ({"/../escaped": [1]}, {}, "not a booster parameter name"),
    ({"options.temperature": [1.0]}, {}, "loss options and other settings cannot be varied by a gbdt grid"),
    ({"num_boost_round": [100, 300]}, {}, "gbdt.0.grid.num_boost_round: set by the harness"),
    ({"num_leaves": list(range(2, 202)), "max_depth": list(range(1, 52))}, {},
     "gbdt.0.grid: 10200 combinations, more than the 10000"),
    ({"num_leaves": []}, {}, "gbdt.0.grid.num_leaves"),
    ({"boosting": ["gbdt", "a b"]}, {}, "gbdt.0.grid.boosting: ['a b'] cannot be part of a method label"),
    ({"num_leaves": [3, -4]}, {}, "gbdt.0 (lightgbm-lambdarank-num_leaves-4)"),
    ({"num_leaves": 3}, {}, "gbdt.0.grid.num_leaves"),
    # LightGBM's aliases: the harness's parameters under another name, one parameter in two places,
    # and a misspelt key, which LightGBM would only warn of (every method of the grid the same run).
    ({"num_round": [50, 100]}, {}, "gbdt.0.grid.num_round (= num_iterations): set by the harness"),
    ({"num_leaves": [3, 5], "num_leaf": [3, 5]}, {},
     "gbdt.0.grid.num_leaf: the same parameter as grid key num_leaves"),
    ({"min_sum_hessian_in_leaf": ["1e3", 1000]}, {}, "'1e3' and 1000 are one value under two labels"),
    ({"lambda_l2": [1, 0.5, 1.0]}, {}, "gbdt.0.grid.lambda_l2: 1 and 1.0 are one value under two labels"),
    ({"num_leaf": [3, 7]}, {"num_leaves": 5}, "gbdt.0.grid.num_leaf: also set in params (as num_leaves"),
    ({"num_leafs": [3, 7]}, {}, "gbdt.0.grid.num_leafs: not a lightgbm parameter (misspelt?"),
])
def test_gbdt_grid_errors_name_the_key_and_the_method(letor_files, grid, params, fragment):
    item = {"library": "lightgbm", "objective": "lambdarank", "params": params, "grid": grid}
    with pytest.raises(ConfigError) as info:
        spec_from_dict(_spec_dict(letor_files, gbdt=[item], baseline=None), source="grid.yaml")
    assert fragment in str(info.value)


def test_loss_grid_expands_to_the_losses_written_out(letor_files):
    models = [{"label": "mlp", "kind": "mlp", "hidden": [4]}, {"label": "mlp2", "kind": "mlp", "hidden": [2]}]
    item = {"name": "neural_ndcg", "options": {"k": 5}, "overrides": {"optimizer": {"name": "adam"}},
            "grid": {"options.temperature": [0.5, 1.0], "overrides.optimizer.lr": [0.001, 0.01],
                     "model_options.dropout": [0.1]}}
    grid = spec_from_dict(_spec_dict(letor_files, models=models, losses=[item], gbdt=[], baseline=None))
    combos = [(t, lr) for t in (0.5, 1.0) for lr in (0.001, 0.01)]
    tags = [f"neural_ndcg-temperature{t}-lr{lr}-dropout0.1" for t, lr in combos]
    written = spec_from_dict(_spec_dict(letor_files, models=models, gbdt=[], baseline=None, losses=[
        {"name": "neural_ndcg", "label": tag, "options": {"k": 5, "temperature": t},
         "overrides": {"optimizer": {"name": "adam", "lr": lr}}, "model_options": {"dropout": 0.1}}
        for tag, (t, lr) in zip(tags, combos, strict=True)]))
    methods = [f"{tag}-{model}" for tag in tags for model in ("mlp", "mlp2")]
    assert grid.method_labels() == written.method_labels() == methods
    a, b = expand(grid), expand(written)
    assert [c.fingerprint() for c in a] == [c.fingerprint() for c in b] and len(a) == 8
    config = a[-1].settings["config"]
    assert config["loss"]["options"] == {"k": 5, "temperature": 1.0}
    assert config["optimizer"] == {"name": "adam", "lr": 0.01} and config["model"]["dropout"] == 0.1
    assert item["overrides"] == {"optimizer": {"name": "adam"}}  # the item itself is left as it was


@pytest.mark.parametrize(("item", "fragment"), [
    ({"grid": {"temperature": [1.0]}}, "losses.0.grid.temperature: expected options.<name>"),
    ({"grid": {"options.": [1.0]}}, "losses.0.grid.options.: expected"),
    ({"options": {"temperature": 2.0}, "grid": {"options.temperature": [1.0]}},
     "losses.0.grid.options.temperature: also set in the item"),
    ({"overrides": {"optimizer": {"lr": 0.1}}, "grid": {"overrides.optimizer.lr.x": [1]}},
     "losses.0.grid.overrides.optimizer.lr.x: optimizer.lr is not a mapping"),
    ({"grid": {"overrides.optimizer": [1], "overrides.optimizer.lr": [0.1]}},
     "losses.0.grid.overrides.optimizer: ['overrides.optimizer.lr'] vary settings inside it"),
    ({"grid": {"options.temperature": [1.0, 1.0]}},
     "losses.0.grid.options.temperature: values that give the same label text ['1.0']"),
    ({"grid": {"options.temperature": [-1.0]}}, "losses.0 (neural_ndcg-temperature-1.0).options"),
    ({"grid": {"options.temperature": [1, 1.0]}},
     "losses.0.grid.options.temperature: 1 and 1.0 are one value under two labels"),
    ({"grid": {"options.colour": [1]}},
     "losses.0 (neural_ndcg-colour1).options: unknown option(s) ['colour']"),
    ({"grid": {"overrides.seed": [1]}}, "losses.0 (neural_ndcg-seed1).overrides.seed: set by the grid"),
    ({"grid": {"overrides.optimizer.lr": [-1]}}, "optimizer.lr"),
])
def test_loss_grid_errors_name_the_key_and_the_loss(letor_files, item, fragment):
    with pytest.raises(ConfigError) as info:
        spec_from_dict(_spec_dict(letor_files, losses=[{"name": "neural_ndcg", **item}]), source="grid.yaml")
    assert fragment in str(info.value)


def test_loss_model_options_reach_only_that_loss(letor_files):
    # The NeuralNDCG paper's protocol: tanh on the output for NeuralNDCG only.
    models = [{"label": "mlp", "kind": "mlp", "hidden": [4]}]
    losses = [{"name": "neural_ndcg", "model_options": {"output_activation": "tanh"}}, "list_net"]
    spec = spec_from_dict(_spec_dict(letor_files, losses=losses, models=models, gbdt=[], baseline=None))
    model = {c.method: c.settings["config"]["model"] for c in expand(spec)}
    assert model["neural_ndcg-mlp"] == {"kind": "mlp", "hidden": [4], "output_activation": "tanh"}
    assert model["list_net-mlp"] == {"kind": "mlp", "hidden": [4]}


def test_spec_lists_every_problem(letor_files):
    bad = _spec_dict(letor_files, baseline="nope", select_by="ndcg@7")
    bad["losses"] = ["neural_ndcg", {"name": "no_such_loss"}, {"name": "approx_ndcg", "options": {"tau": 1}}]
    bad["datasets"][0]["test"] = str(letor_files / "missing.txt")
    bad["gbdt"].append({"library": "xgboost", "objective": "lambdarank"})
    bad["gbdt"].append({"library": "lightgbm", "objective": "lambdarank", "params": {"objective": "x"}})
    with pytest.raises(ConfigError) as info:
        spec_from_dict(bad, source="grid.yaml")
    message = str(info.value)
    assert message.startswith("grid.yaml: ")
    for fragment in ("baseline: 'nope'", "select_by", "no_such_loss", "['tau']", "datasets.0.test",
                     "gbdt.1.objective", "gbdt.2.params", "label 'lightgbm-lambdarank' is used twice"):
        assert fragment in message, fragment


@pytest.mark.parametrize(("patch", "fragment"), [
    ({"colour": 1}, "colour: unknown key"),
    ({"datasets": [{"name": "m", "mq2008_folds": [0]}]}, "datasets.0.mq2008_folds.0"),
    ({"datasets": [{"name": "m", "mq2008_folds": [1], "train": "x"}]}, "exclusive"),
    ({"losses": [], "models": [], "gbdt": []}, "the grid is empty"),
    ({"neural": {"optimizer": {"lr": -1}}}, "optimizer.lr"),
    ({"metrics": ["ndcg@10", "bogus"]}, "metrics.1"),
    ({"alpha": 1.5}, "alpha"),
    ({"neural": {"model": {"kind": "mlp"}}}, "neural.model: set by the grid"),
    ({"losses": [{"name": "approx_ndcg", "options": {"discount": {"shallow": 3.0, "n": 10}}}]},
     "losses.0.options: alpha"),
    ({"losses": [{"name": "approx_ndcg", "options": {"discount": {"alpha": 0.5}}}]}, "losses.0.options"),
    ({"losses": [{"name": "list_net", "model_options": {"kind": "mlp"}}]}, "losses.0.model_options.kind"),
    ({"losses": [{"name": "list_net", "model_options": {"colour": 1}}]}, "colour"),
])
def test_spec_errors_name_the_key(letor_files, patch, fragment):
    with pytest.raises(ConfigError, match="problem") as info:
        spec_from_dict(_spec_dict(letor_files, **patch))
    assert fragment in str(info.value)


@pytest.mark.parametrize(("patch", "key"), [
    ({"num_threads": True}, "num_threads"),
    ({"alpha": False}, "alpha"),
    ({"datasets": [{"name": "m", "mq2008_folds": [True]}]}, "datasets.0.mq2008_folds.0"),
    ({"gbdt": [{"library": "lightgbm", "objective": "lambdarank", "early_stopping_rounds": True}]},
     "gbdt.0.early_stopping_rounds"),
    ({"gbdt": [{"library": "lightgbm", "objective": "lambdarank", "num_boost_round": True}]},
     "gbdt.0.num_boost_round"),
])
def test_spec_refuses_a_boolean_where_a_number_is_expected(letor_files, patch, key):
    # YAML's true/false are ints to pydantic: `num_threads: true` would run with 1 thread and
    # `early_stopping_rounds: true` stop after 1 round, as the training config refuses too.
    with pytest.raises(ConfigError) as info:
        spec_from_dict(_spec_dict(letor_files, **patch))
    assert f"{key}: expected a number, not a boolean" in str(info.value)


def test_load_spec_resolves_relative_paths(letor_files, tmp_path):
    spec_path = letor_files / "grid.yaml"
    data = _spec_dict(letor_files)
    data["datasets"][0].update(train="train.txt", valid="vali.txt", test="test.txt")
    spec_path.write_text(yaml.safe_dump(data))
    cells = expand(load_spec(spec_path))
    assert cells[-1].settings["data"]["train"] == str((letor_files / "train.txt").resolve())
    (tmp_path / "broken.yaml").write_text("name: [unclosed\n")
    with pytest.raises(ConfigError, match=r"broken\.yaml: not valid YAML"):
        load_spec(tmp_path / "broken.yaml")


def test_spec_paths_expand_environment_variables(letor_files, monkeypatch):
    # The shipped file specs write ${SMOOTHRANK_SHARED:-../../shared}/data/...
    spec_path = letor_files / "env.yaml"
    data = _spec_dict(letor_files)
    data["datasets"][0].update(train="${SR_DATA}/train.txt", valid="${SR_UNSET:-.}/vali.txt",
                               test="$HOME_IS_NOT_EXPANDED/../test.txt")
    spec_path.write_text(yaml.safe_dump(data))
    (letor_files / "$HOME_IS_NOT_EXPANDED").mkdir(exist_ok=True)
    monkeypatch.setenv("SR_DATA", str(letor_files))
    monkeypatch.delenv("SR_UNSET", raising=False)
    spec = load_spec(spec_path)
    assert spec.datasets[0].train == f"{letor_files}/train.txt"
    assert spec.datasets[0].valid == "./vali.txt"  # the default, relative to the spec file
    assert spec.datasets[0].test == "$HOME_IS_NOT_EXPANDED/../test.txt"  # only ${...} is a variable
    monkeypatch.setenv("SR_UNSET", "")  # set but empty takes the default too, as in the shell
    assert load_spec(spec_path).datasets[0].valid == "./vali.txt"
    monkeypatch.delenv("SR_DATA")
    with pytest.raises(ConfigError, match=r"(?s)env\.yaml.*datasets\.0\.train: environment variable SR_DATA"):
        load_spec(spec_path)


# ------------------------------------------------------------------------------ GBDT
@pytest.mark.parametrize(("library", "objective"), [
    ("lightgbm", "lambdarank"), ("lightgbm", "rank_xendcg"),
    ("xgboost", "rank:pairwise"), ("xgboost", "rank:ndcg"),
])
def test_gbdt_learns_and_keeps_row_order(letor_files, library, objective):
    train = load_letor(letor_files / "train.txt")
    valid = load_letor(letor_files / "vali.txt")
    test = load_letor(letor_files / "test.txt")
    params = {"min_data_in_leaf": 5} if library == "lightgbm" else {}
    fitted = fit_gbdt(train, valid, library=library, objective=objective, num_boost_round=40,
                      early_stopping_rounds=10, params=params)
    assert 1 <= fitted.best_iteration <= fitted.rounds_run <= 40
    scores = fitted.predict(test)
    got = mean_metrics(evaluate_flat(scores, test.labels, offsets=test.offsets, metrics=["ndcg@5"],
                                     convention="lightgbm"))["ndcg@5"]
    # The label is a noisy threshold of feature 1: ranking by feature 1 itself is the oracle-ish bar.
    by_feature = mean_metrics(evaluate_flat(test.features[:, 0], test.labels, offsets=test.offsets,
                                            metrics=["ndcg@5"], convention="lightgbm"))["ndcg@5"]
    shuffled = mean_metrics(evaluate_flat(-test.features[:, 0], test.labels, offsets=test.offsets,
                                          metrics=["ndcg@5"], convention="lightgbm"))["ndcg@5"]
    assert got > shuffled + 0.2
    assert got > by_feature - 0.1
    # Row order: predicting a reversed copy of the features gives the reversed scores.
    rev = test.with_features(test.features[::-1].copy())
    np.testing.assert_allclose(fitted.predict(rev)[::-1], scores, rtol=1e-6)


def test_gbdt_rejects_reserved_params(letor_files):
    train = load_letor(letor_files / "train.txt")
    with pytest.raises(ConfigError, match="set by the harness"):
        fit_gbdt(train, None, library="lightgbm", objective="lambdarank", params={"eval_at": [3]})
    # An alias, caught when training too.
    with pytest.raises(ConfigError, match=r"num_round \(= num_iterations\)"):
        fit_gbdt(train, None, library="lightgbm", objective="lambdarank", params={"num_round": 3})
    with pytest.raises(ConfigError, match="objective"):
        fit_gbdt(train, None, library="lightgbm", objective="rank:ndcg")


@pytest.mark.parametrize(("library", "objective", "params", "fragment"), [
    # LightGBM takes each harness parameter under aliases; a user value would replace the harness's.
    ("lightgbm", "lambdarank", {"num_round": 50}, "['num_round (= num_iterations)'] are set by the harness"),
    ("lightgbm", "lambdarank", {"n_jobs": 4}, "['n_jobs (= num_threads)'] are set by the harness"),
    ("lightgbm", "lambdarank", {"early_stopping_min_delta": 0.5}, "['early_stopping_min_delta'] are set by"),
    ("lightgbm", "lambdarank", {"verbose": 1}, "['verbose (= verbosity)'] would be ignored: the harness"),
    ("xgboost", "rank:ndcg", {"num_trees": 3}, "['num_trees'] are set by the harness"),
    ("xgboost", "rank:ndcg", {"n_jobs": 3}, "['n_jobs (= nthread)'] are set by the harness"),
    ("xgboost", "rank:ndcg", {"learning_rate": 0.1, "eta": 0.01},
     "['learning_rate', 'eta (= learning_rate)'] name one xgboost parameter more than once"),
    # XGBoost's verbosity is process-wide: a user's 0 must not silence the check of the unused keys.
    ("xgboost", "rank:ndcg", {"verbosity": 0, "max_dpeth": 3}, "['max_dpeth'] not xgboost parameter(s)"),
    ("lightgbm", "lambdarank", {"early_stopping": 5}, "['early_stopping (= early_stopping_round)']"),
    ("lightgbm", "lambdarank", {"application": "binary"}, "['application (= objective)']"),
    ("lightgbm", "lambdarank", {"ndcg_at": [3]}, "['ndcg_at (= eval_at)']"),
    ("lightgbm", "list_mle", {"random_seed": 3}, "['random_seed (= seed)']"),
    ("lightgbm", "lambdarank", {"num_leaves": 7, "num_leaf": 9},
     "['num_leaves', 'num_leaf (= num_leaves)'] name one lightgbm parameter more than once"),
    # Misspellings: both libraries only warn of them and train as if they were absent.
    ("lightgbm", "lambdarank", {"num_leafs": 7}, "['num_leafs'] not lightgbm parameter(s) that it uses here"),
    ("lightgbm", "neural_ndcg", {"min_data_in_lef": 7}, "['min_data_in_lef'] not lightgbm parameter(s)"),
    ("xgboost", "rank:ndcg", {"max_depht": 3, "eta": 0.1}, "['max_depht'] not xgboost parameter(s) that it"),
    ("xgboost", "list_mle", {"max_depht": 3}, "['max_depht'] not xgboost parameter(s)"),
])
def test_gbdt_params_under_aliases_or_misspelt_are_refused_before_any_run(letor_files, library, objective,
                                                                          params, fragment):
    pytest.importorskip(library)
    item = {"library": library, "objective": objective, "params": params}
    with pytest.raises(ConfigError) as info:
        spec_from_dict(_spec_dict(letor_files, gbdt=[item], baseline=None), source="aliases.yaml")
    assert "gbdt.0.params: " in str(info.value) and fragment in str(info.value)


def test_a_refused_grid_is_reported_without_misleading_method_lists(letor_files):
    """The baseline and blend members name the grid's methods; while the grid is refused (not
    expanded) they are not reported as unknown, against a method list that lacks them."""
    grid_loss = {"name": "neural_ndcg", "grid": {"temperature": [1.0, 2.0]}}  # a path without options.
    method = "neural_ndcg-temperature1.0-linear"
    data = _spec_dict(letor_files, losses=[grid_loss], baseline=method,
                      blends=[{"label": "b", "members": [method, "lightgbm-lambdarank"]}])
    with pytest.raises(ConfigError) as info:
        spec_from_dict(data, source="grid.yaml")
    lines = [line for line in str(info.value).splitlines() if line.startswith("  - ")]
    assert len(lines) == 1 and "losses.0.grid.temperature: expected options.<name>" in lines[0]


def test_a_problem_every_grid_combination_shares_is_reported_once(letor_files):
    """A misspelt XGBoost key is found in each combination's check (what XGBoost uses depends on the
    booster): one line for all six, naming the first method and how many more."""
    pytest.importorskip("xgboost")
    item = {"library": "xgboost", "objective": "rank:ndcg",
            "grid": {"max_depht": [3, 4, 5], "eta": [0.1, 0.2]}}
    with pytest.raises(ConfigError) as info:
        spec_from_dict(_spec_dict(letor_files, gbdt=[item], baseline=None), source="grid.yaml")
    lines = [line for line in str(info.value).splitlines() if line.startswith("  - ")]
    assert lines == ["  - gbdt.0 (xgboost-rank_ndcg-max_depht3-eta0.1 and 5 more).params: ['max_depht'] "
                     "not xgboost parameter(s) that it uses here (misspelt? xgboost would only warn and "
                     "ignore them, and the runs would not differ)"]


def test_xgboost_alias_table_matches_the_library():
    """Each alias of the table sets its parameter in XGBoost's own configuration (so two of them in
    one item are one parameter given twice)."""
    xgb = pytest.importorskip("xgboost")
    from smoothrank.experiments.gbdt import _XGBOOST_ALIASES

    data = xgb.DMatrix(np.zeros((4, 1), dtype=np.float32), label=[1.0, 0.0, 1.0, 0.0], qid=[0, 0, 1, 1])
    values = {"eta": 0.125, "gamma": 0.375, "lambda": 0.625, "alpha": 0.875, "random_state": 7, "n_jobs": 3}
    assert set(values) == set(_XGBOOST_ALIASES)

    def found(config, key):
        if isinstance(config, dict):
            for name, value in config.items():
                yield from ([value] if name == key else []) + list(found(value, key))

    for alias, name in _XGBOOST_ALIASES.items():
        booster = xgb.Booster({"objective": "rank:ndcg", alias: values[alias]}, [data])
        config = json.loads(booster.save_config())
        assert {float(v) for v in found(config, name)} == {values[alias]}, (alias, name)


@pytest.mark.parametrize(("library", "params"), [
    ("lightgbm", {"num_leaf": 7, "min_child_samples": 5, "eta": 0.05, "subsample": 0.8, "subsample_freq": 1,
                  "colsample_bytree": 0.9, "reg_lambda": 1.0, "verbosity": -1, "label_gain": [0, 1, 3]}),
    ("xgboost", {"max_depth": 3, "eta": 0.05, "subsample": 0.8, "lambda": 1.0, "min_child_weight": 2,
                 "lambdarank_pair_method": "topk", "lambdarank_num_pair_per_sample": 4}),
    # gblinear does not use the harness's tree_method: that is not the user's key to answer for.
    ("xgboost", {"booster": "gblinear", "updater": "coord_descent", "feature_selector": "shuffle"}),
])
def test_gbdt_params_the_libraries_know_are_accepted(letor_files, library, params):
    """The misspelling check refuses no name the library takes, aliases included."""
    pytest.importorskip(library)
    objective = "lambdarank" if library == "lightgbm" else "rank:ndcg"
    item = {"library": library, "objective": objective, "params": params}
    spec = spec_from_dict(_spec_dict(letor_files, gbdt=[item], baseline=None), source="known.yaml")
    assert spec.gbdt[0].params == params


@pytest.mark.parametrize("constraints", [[[100]], [[0], [46]], "[0,1],[46]", [[0, -1]], [["f1"]], [3], 7])
def test_lightgbm_interaction_constraints_beyond_the_features_are_refused(letor_files, constraints):
    """LightGBM 4.7 segfaults in training on a constraint group of features the data lacks (seen on
    MQ2008 with ``[[100]]``): refused before training, naming the parameter and the feature range."""
    train = load_letor(letor_files / "train.txt")
    message = r"params\.interaction_constraints: .*(feature index|list of lists)"
    with pytest.raises(ConfigError, match=message):
        fit_gbdt(train, None, library="lightgbm", objective="lambdarank", num_boost_round=2,
                 params={"interaction_constraints": constraints})


@pytest.mark.parametrize("constraints", [[[0, 1], [2]], "[0,1],[2]"])
def test_lightgbm_interaction_constraints_within_the_features_train(letor_files, constraints):
    train = load_letor(letor_files / "train.txt")
    fitted = fit_gbdt(train, None, library="lightgbm", objective="lambdarank", num_boost_round=3,
                      params={"interaction_constraints": constraints, "min_data_in_leaf": 2})
    assert np.isfinite(fitted.predict(train)).all()


@pytest.mark.parametrize(("objective", "ndcg1", "ndcg3"), [("lambdarank", 0.5674, 0.578),
                                                           ("rank_xendcg", 0.6211, 0.6253)])
def test_lightgbm_example_thresholds(shared_dir, objective, ndcg1, ndcg3):
    # LightGBM's own test suite: 50 rounds on rank.train, early-stopped on rank.test (its protocol,
    # so here valid = test), NDCG under LightGBM's convention; selection on NDCG@3.
    root = shared_dir / "data" / "LightGBM-lambdarank"
    train = load_letor(root / "rank.train.gz")
    test = load_letor(root / "rank.test.gz", n_features=train.n_features)
    fitted = fit_gbdt(train, test, library="lightgbm", objective=objective, num_boost_round=50,
                      early_stopping_rounds=10, eval_at=3)
    got = mean_metrics(evaluate_flat(fitted.predict(test), test.labels, offsets=test.offsets,
                                     metrics=["ndcg@1", "ndcg@3"], convention="lightgbm"))
    assert got["ndcg@1"] > ndcg1
    assert got["ndcg@3"] > ndcg3


# ------------------------------------------------------------------------------ stats
def _student_t3_sf(t: float) -> float:
    # Closed-form survival function of Student's t with 3 degrees of freedom.
    u = t / math.sqrt(3.0)
    return 0.5 - (u / (1 + u * u) + math.atan(u)) / math.pi


def test_paired_ttest_hand_check():
    a = [0.5, 0.7, 0.9, 1.1]
    b = [0.4, 0.5, 0.6, 0.7]  # differences 0.1, 0.2, 0.3, 0.4
    result = paired_ttest(a, b)
    # mean 0.25, sd sqrt(1/60) = 0.129099, t = 0.25 / (0.129099 / 2) = 3.872983
    assert result.n == 4
    assert result.mean_difference == pytest.approx(0.25)
    assert result.statistic == pytest.approx(0.25 / (math.sqrt(1 / 60) / 2))
    assert result.pvalue == pytest.approx(2 * _student_t3_sf(result.statistic), rel=1e-9)
    assert result.pvalue == pytest.approx(0.03047, abs=1e-5)
    assert result.direction(0.05) == 1 and result.direction(0.01) == 0
    swapped = paired_ttest(b, a)
    assert swapped.statistic == pytest.approx(-result.statistic) and swapped.direction() == -1


@pytest.mark.parametrize("alpha", [0.05, 0.01, 0.2])
def test_paired_confidence_interval_matches_scipy_and_the_test(alpha):
    from scipy.stats import ttest_rel

    rng = np.random.default_rng(7)
    for shift in (0.0, 0.05, 0.15):
        a, b = rng.uniform(size=30) + shift, rng.uniform(size=30)
        result = paired_ttest(a, b)
        low, high = result.confidence_interval(alpha)
        reference = ttest_rel(a, b).confidence_interval(1 - alpha)
        assert [low, high] == pytest.approx([reference.low, reference.high], rel=1e-9)
        assert result.significant(alpha) == (not low <= 0.0 <= high)
    assert all(math.isnan(v) for v in paired_ttest([1.0], [0.0]).confidence_interval())
    assert paired_ttest([1, 2, 3], [0, 1, 2]).confidence_interval() == (1.0, 1.0)  # constant difference


def test_paired_ttest_degenerate_cases():
    assert paired_ttest([1, 2, np.nan], [1, 2, 3]).pvalue == 1.0  # NaN pair dropped, identical rest
    constant = paired_ttest([1, 2, 3], [0, 1, 2])
    assert constant.pvalue == 0.0 and constant.direction() == 1
    assert math.isnan(paired_ttest([1.0], [0.0]).pvalue)
    # Rounding noise in a constant difference is not a distribution (scipy would warn and misjudge).
    noisy = paired_ttest([0.41 - 0.31, 0.6 - 0.5], [0.0, 0.0])
    assert noisy.pvalue == 0.0
    with pytest.raises(SmoothrankError, match="pair up"):
        paired_ttest([1, 2], [1, 2, 3])


def test_mean_std():
    mean, std, n = mean_std([0.2, 0.4, float("nan"), 0.9])
    assert (mean, n) == (pytest.approx(0.5), 3)
    assert std == pytest.approx(math.sqrt(((0.3) ** 2 + 0.1 ** 2 + 0.4 ** 2) / 2))
    assert math.isnan(mean_std([0.3])[1])


def _holm_rejects(p: np.ndarray, alpha: float) -> np.ndarray:
    """Holm's procedure by its definition: reject in ascending order while p_(j) <= alpha/(m-j+1)."""
    order, m = np.argsort(p, kind="stable"), p.size
    out = np.zeros(m, dtype=bool)
    for j, i in enumerate(order):
        if p[i] > alpha / (m - j):
            break
        out[i] = True
    return out


def _bh_rejects(p: np.ndarray, alpha: float) -> np.ndarray:
    """Benjamini-Hochberg by its definition: reject the k smallest, k = max{i: p_(i) <= i alpha/m}."""
    order, m = np.argsort(p, kind="stable"), p.size
    passing = [i + 1 for i in range(m) if p[order[i]] <= (i + 1) * alpha / m]
    out = np.zeros(m, dtype=bool)
    out[order[:max(passing, default=0)]] = True
    return out


@pytest.mark.parametrize(("method", "rejects"), [("holm", _holm_rejects), ("bh", _bh_rejects)])
def test_adjusted_pvalues_reject_as_the_procedures_do(method, rejects):
    rng = np.random.default_rng(4)
    for trial in range(200):
        m = int(rng.integers(1, 12))
        p = np.round(rng.uniform(0, 0.2, m) ** (1 + trial % 3), 3)  # ties included
        adjusted = adjust_pvalues(p, method)
        assert ((adjusted >= p - 1e-15) & (adjusted <= 1)).all()
        for alpha in (0.01, 0.05, 0.1):
            np.testing.assert_array_equal(adjusted <= alpha, rejects(p, alpha))
    with_nan = adjust_pvalues([0.01, np.nan, 0.02], method)
    assert math.isnan(with_nan[1]) and with_nan[[0, 2]] == pytest.approx(adjust_pvalues([0.01, 0.02], method))


def test_adjust_pvalues_none_and_errors():
    p = np.array([0.3, 0.01, np.nan])
    np.testing.assert_array_equal(adjust_pvalues(p, "none"), p)
    with pytest.raises(SmoothrankError, match="correction: expected one of none, holm, bh"):
        adjust_pvalues(p, "bonferroni")
    with pytest.raises(SmoothrankError, match=r"pvalues: expected values in \[0, 1\]"):
        adjust_pvalues([0.5, 1.5], "holm")


def test_summary_adjusts_each_metric_over_the_methods():
    rng = np.random.default_rng(9)
    base = list(rng.uniform(0, 1, size=60))
    # Three methods against the baseline: a clear gain, a marginal one (p = 0.033: significant alone,
    # not after Holm's adjustment, still after Benjamini-Hochberg's), none.
    shifts = {"clear": 0.25, "marginal": 0.05, "none": 0.0}
    results = [_fake("base", 1, base, 0.5)]
    for name, shift in shifts.items():
        values = [min(1.0, v + shift + rng.normal(0, 0.2)) for v in base]
        results.append(_fake(name, 1, values, 0.5))
    plain = {r["method"]: r for r in summarize(results, metrics=["ndcg@1"], baseline="base")
             if r["split"] == "test" and r["baseline"]}
    for correction in ("holm", "bh"):
        rows = summarize(results, metrics=["ndcg@1"], baseline="base", correction=correction)
        tested = {r["method"]: r for r in rows if r["split"] == "test" and r["baseline"]}
        p = [plain[m]["p_value"] for m in shifts]
        want = adjust_pvalues(p, correction)
        for (method, row), w in zip(tested.items(), want, strict=True):
            assert row["p_value"] == plain[method]["p_value"] and row["p_adjusted"] == pytest.approx(w)
            assert row["significant"] == (0 if w >= 0.05 else (1 if row["mean_difference"] > 0 else -1))
        assert tested["marginal"]["significant"] == {"holm": 0, "bh": 1}[correction]
        text = format_markdown(rows, metrics=["ndcg@1"], title="T", convention="trec", baseline="base",
                               alpha=0.05, correction=correction)
        assert {"holm": "Holm-adjusted", "bh": "Benjamini-Hochberg-adjusted"}[correction] in text
        assert "`trec`" in text  # every number printed with its convention (PITFALLS 10)
    assert all(plain[m]["p_adjusted"] == plain[m]["p_value"] for m in shifts)  # none: unchanged
    assert plain["marginal"]["significant"] == 1 and plain["marginal"]["p_value"] > 0.025
    assert "p_adjusted" in format_csv(rows, convention="trec").splitlines()[0]
    with pytest.raises(SmoothrankError, match="correction"):
        summarize(results, metrics=["ndcg@1"], baseline="base", correction="sidak")


def test_summary_adjusts_each_metric_on_its_own():
    # A family is one metric's tests over the methods: with two metrics, Holm multiplies the
    # smallest p-value by the number of methods (3), not by that of methods x metrics (6).
    rng = np.random.default_rng(4)
    base = rng.uniform(0, 1, size=(2, 60))
    results = []
    for name, shift in {"base": 0.0, "clear": 0.25, "marginal": 0.05, "none": 0.0}.items():
        values = base if name == "base" else np.clip(base + shift + rng.normal(0, 0.2, size=base.shape), 0, 1)
        means = {"ndcg@1": float(values[0].mean()), "map": float(values[1].mean())}
        results.append({"dataset": "mq2008", "method": name, "fold": 1, "seed": 0, "kind": "neural",
                        "metrics": {"test": means},
                        "per_query": {"qids": [str(i) for i in range(60)], "ndcg@1": values[0].tolist(),
                                      "map": values[1].tolist()}})
    plain = summarize(results, metrics=["ndcg@1", "map"], baseline="base")
    rows = summarize(results, metrics=["ndcg@1", "map"], baseline="base", correction="holm")
    def tested(rows: list[dict], metric: str, key: str) -> list[float]:
        return [r[key] for r in rows if r["split"] == "test" and r["baseline"] and r["metric"] == metric]

    for metric in ("ndcg@1", "map"):
        p, adjusted = tested(plain, metric, "p_value"), tested(rows, metric, "p_adjusted")
        assert len(p) == 3
        assert adjusted == pytest.approx(adjust_pvalues(p, "holm").tolist())


# ------------------------------------------------------------------------------ report
def _fake(method: str, fold: int, test: list[float], train_value: float, seed: int = 0) -> dict:
    return {"dataset": "mq2008", "method": method, "fold": fold, "seed": seed,
            "kind": "gbdt" if method == "base" else "neural",
            "metrics": {"test": {"ndcg@1": float(np.mean(test))}, "train": {"ndcg@1": train_value}},
            "per_query": {"qids": [f"{fold}-{i}" for i in range(len(test))], "ndcg@1": test}}


def test_summary_hand_check():
    rng = np.random.default_rng(1)
    base = {f: list(rng.uniform(0, 0.5, size=20)) for f in (1, 2)}
    better = {f: [v + 0.3 + 0.01 * i for i, v in enumerate(base[f])] for f in (1, 2)}
    results = [_fake("base", f, base[f], 0.5) for f in (1, 2)]
    results += [_fake("ours", f, better[f], 0.6 + 0.1 * f) for f in (1, 2)]
    rows = summarize(results, metrics=["ndcg@1"], baseline="base", alpha=0.05)
    ours = {r["split"]: r for r in rows if r["method"] == "ours"}
    fold_means = [np.mean(better[1]), np.mean(better[2])]
    assert ours["test"]["mean"] == pytest.approx(np.mean(fold_means))
    assert ours["test"]["std"] == pytest.approx(np.std(fold_means, ddof=1))
    assert ours["train"]["mean"] == pytest.approx(0.75)
    assert ours["test"]["n_queries"] == 40 and ours["test"]["significant"] == 1
    pooled = paired_ttest(better[1] + better[2], base[1] + base[2])
    assert ours["test"]["p_value"] == pytest.approx(pooled.pvalue)
    base_row = next(r for r in rows if r["method"] == "base" and r["split"] == "test")
    assert base_row["baseline"] == "" and math.isnan(base_row["p_value"])

    text = format_markdown(rows, metrics=["ndcg@1"], title="T", convention="letor4", baseline="base",
                           alpha=0.05, command="smoothrank experiment x.yaml")
    assert "`smoothrank experiment x.yaml`" in text
    line = next(x for x in text.splitlines() if x.startswith("| ours |"))
    assert line == f"| ours | {np.mean(fold_means):.4f} ± {np.std(fold_means, ddof=1):.4f} ▲ |"
    assert "| RankBoost (published) | 0.3856 |" in text  # mq2008 under letor4
    assert "(published)" not in format_markdown(rows, metrics=["ndcg@1"], title="T", convention="lightgbm",
                                                baseline="base", alpha=0.05)
    parsed = list(csv.DictReader(io.StringIO(format_csv(rows, convention="letor4"))))
    assert {(r["method"], r["split"]) for r in parsed} == {("base", "test"), ("base", "train"),
                                                           ("ours", "test"), ("ours", "train")}
    assert float(next(r for r in parsed if r["method"] == "ours" and r["split"] == "test")["mean"]) == \
        pytest.approx(np.mean(fold_means), abs=1e-5)


def test_summary_csv_states_the_convention_in_a_last_column(tmp_path):
    # Every row names its metric convention; the column comes last, so the columns of files written
    # before it keep their names and positions.
    results = [_fake("base", f, [0.2, 0.4], 0.5) for f in (1, 2)] + [_fake("ours", f, [0.3, 0.5], 0.6)
                                                                    for f in (1, 2)]
    write_reports(results, tmp_path, metrics=["ndcg@1"], title="T", convention="trec", baseline="base")
    header, *lines = (tmp_path / "summary.csv").read_text().splitlines()
    old = ("dataset,method,kind,split,metric,mean,std,n_folds,n_runs,baseline,p_value,t_statistic,"
           "n_queries,significant,p_adjusted")
    assert header == old + ",convention,se"  # the standard error came after the convention
    parsed = list(csv.DictReader(io.StringIO((tmp_path / "summary.csv").read_text())))
    assert len(parsed) == len(lines) == 4 and {r["convention"] for r in parsed} == {"trec"}
    assert all(line.split(",")[15] == "trec" for line in lines)
    assert {r["split"]: r["se"] == "" for r in parsed} == {"test": False, "train": True}
    assert json.loads((tmp_path / "summary.json").read_text())["convention"] == "trec"
    with pytest.raises(TypeError):
        format_csv(summarize(results, metrics=["ndcg@1"]))  # the convention must be given


def test_standard_error_of_the_fold_means_by_hand_and_by_simulation():
    folds = [[0.0, 1.0, 1.0], [0.5, 0.25, math.nan, 0.75, 1.0]]
    by_hand = math.sqrt(np.var(folds[0], ddof=1) / 3 + np.var([0.5, 0.25, 0.75, 1.0], ddof=1) / 4) / 2
    assert fold_mean_standard_error(folds) == pytest.approx(by_hand)
    assert math.isnan(fold_mean_standard_error([[0.1, 0.2], [0.3]]))  # a fold's variance is unknown
    assert math.isnan(fold_mean_standard_error([]))
    # Monte-Carlo: over many draws of five unequal test folds, the spread of the mean of the fold
    # means is what the formula predicts from one draw (on average over draws).
    rng = np.random.default_rng(0)
    sizes = (150, 160, 155, 170, 149)
    draws = [[rng.binomial(1, 0.35, n).astype(float) for n in sizes] for _ in range(2000)]
    spread = np.std([np.mean([f.mean() for f in d]) for d in draws], ddof=1)
    predicted = np.mean([fold_mean_standard_error(d) for d in draws])
    assert predicted == pytest.approx(spread, rel=0.05)


def test_test_rows_carry_the_standard_error_and_the_target_table_weighs_gaps_by_it():
    rng = np.random.default_rng(3)
    per_fold = {f: list(rng.uniform(0, 1, size=30)) for f in range(1, 6)}
    results = []
    for f, values in per_fold.items():
        r = _fake("ours", f, values, 0.5)
        for m in ("ndcg@3", "ndcg@5", "map"):
            r["metrics"]["test"][m] = float(np.mean(values))
            r["per_query"][m] = values
        r["metrics"]["valid"] = {"ndcg@10": 0.3}
        results.append(r)
    metrics = ["ndcg@1", "ndcg@3", "ndcg@5", "map"]
    rows = summarize(results, metrics=metrics)
    test = next(r for r in rows if r["split"] == "test" and r["metric"] == "ndcg@1")
    se = math.sqrt(sum(np.var(v, ddof=1) / 30 for v in per_fold.values())) / 5
    assert test["se"] == pytest.approx(se)
    assert all("se" not in r for r in rows if r["split"] != "test")
    text = format_markdown(rows, metrics=metrics, title="T", convention="letor4", baseline=None, alpha=0.05,
                           select_by="ndcg@10")
    line = next(x for x in text.splitlines() if x.startswith("Sampling noise of the first row, `ours`"))
    mean = np.mean([np.mean(v) for v in per_fold.values()])
    gap = mean - 0.3856  # RankBoost's NDCG@1, the best published
    assert f"ndcg@1 {mean:.4f} ± {1.96 * se:.4f} (gap {gap:+.4f}, {gap / se:+.1f} SE)" in line
    # Runs without per-query values: no standard error, and no such line.
    bare = [{**r, "per_query": {}} for r in results]
    rows = summarize(bare, metrics=metrics)
    assert math.isnan(next(r for r in rows if r["split"] == "test")["se"])
    assert "Sampling noise" not in format_markdown(rows, metrics=metrics, title="T", convention="letor4",
                                                   baseline=None, alpha=0.05, select_by="ndcg@10")


def _row(method, split, metric, mean, kind="neural"):
    return {"dataset": "mq2008", "method": method, "kind": kind, "split": split, "metric": metric,
            "mean": mean, "std": 0.0, "n_folds": 5, "n_runs": 5, "baseline": "", "p_value": math.nan,
            "t_statistic": math.nan, "n_queries": 0, "significant": 0}


def test_published_comparison_orders_by_validation_and_needs_every_row_beaten():
    published = {"P": {"ndcg@1": 0.30, "ndcg@3": 0.40, "ndcg@5": 0.45, "map": 0.46},
                 "Q": {"ndcg@1": 0.35, "ndcg@3": 0.38, "ndcg@5": 0.47, "map": 0.44}}
    test_a = {"ndcg@1": 0.36, "ndcg@3": 0.41, "ndcg@5": 0.48, "map": 0.47}   # above both everywhere
    test_b = {"ndcg@1": 0.36, "ndcg@3": 0.41, "ndcg@5": 0.46, "map": 0.47}   # below Q on ndcg@5
    rows = [_row("b", "valid", "ndcg@10", 0.30), _row("a", "valid", "ndcg@10", 0.20)]
    rows += [_row("a", "test", m, v) for m, v in test_a.items()]
    rows += [_row("b", "test", m, v) for m, v in test_b.items()]
    rows.append(_row("c", "test", "ndcg@1", 0.40, kind="gbdt"))  # no validation, missing metrics: last, no
    table = published_comparison(rows, "mq2008", published, select_by="ndcg@10")
    assert [r["method"] for r in table] == ["b", "a", "c"]
    assert table[1]["beats_all"] and not table[0]["beats_all"] and not table[2]["beats_all"]
    assert table[0]["beats"] == {"ndcg@1": True, "ndcg@3": True, "ndcg@5": False, "map": True}
    assert table[2]["beats"]["ndcg@1"] and not table[2]["beats"]["map"]
    tie = [_row("t", "test", m, published["Q"][m] if m == "ndcg@5" else 1.0) for m in test_a]
    assert not published_comparison(tie, "mq2008", published, select_by="ndcg@10")[0]["beats"]["ndcg@5"]


@pytest.mark.parametrize("n_folds", [1, 2, 5])
def test_published_comparison_on_fewer_folds_says_so(n_folds):
    # An audit (2026-11-25): a 40-query cut named "mq2008tiny" got "beats every published row" marks
    # with nothing to say that the published rows are five-fold means over the whole of MQ2008.
    rows = [{**_row("a", split, m, 0.5), "n_folds": n_folds} for split in ("valid", "test")
            for m in ("ndcg@1", "ndcg@3", "ndcg@5", "ndcg@10", "map")]
    text = format_markdown(rows, metrics=["ndcg@1", "ndcg@3", "ndcg@5", "ndcg@10", "map"], title="T",
                           convention="letor4", baseline=None, alpha=0.05, select_by="ndcg@10")
    assert "test against every published row" in text
    assert (f"These rows are means over {n_folds} fold(s)" in text) == (n_folds != 5)


def test_published_comparison_marks_no_row_missing_folds():
    # A review (2026-11-25): a method on 2 of 5 folds kept its ✓ marks (only "all four" checked folds).
    published = {"P": {"ndcg@1": 0.30, "ndcg@3": 0.40, "ndcg@5": 0.45, "map": 0.46}}
    rows = [_row("a", "test", m, 0.9) for m in TARGET_METRICS]
    rows += [{**_row("b", "test", m, 0.9), "n_folds": 2} for m in TARGET_METRICS]
    table = {r["method"]: r for r in published_comparison(rows, "mq2008", published, select_by="ndcg@10")}
    assert all(table["a"]["beats"].values()) and table["a"]["beats_all"]
    assert not any(table["b"]["beats"].values()) and not table["b"]["beats_all"]


def test_published_comparison_picks_by_the_validation_split_never_the_test_split():
    # Validation prefers a, test prefers b, and b comes first in the rows: only the validation
    # values may give the order (the first row is the configuration a user would pick).
    published = {"P": {"ndcg@1": 0.30, "ndcg@3": 0.40, "ndcg@5": 0.45, "map": 0.46}}
    rows = [_row("b", "valid", "ndcg@10", 0.20), _row("b", "test", "ndcg@10", 0.50),
            _row("a", "valid", "ndcg@10", 0.30), _row("a", "test", "ndcg@10", 0.10),
            _row("c", "valid", "ndcg@10", 0.25), _row("c", "test", "ndcg@10", 0.90)]
    table = published_comparison(rows, "mq2008", published, select_by="ndcg@10")
    assert [r["method"] for r in table] == ["a", "c", "b"]
    assert [r["valid"] for r in table] == [0.30, 0.25, 0.20]


@pytest.mark.parametrize(("library", "objective", "params"), [
    ("lightgbm", "lambdarank", {"bagging_fraction": 0.5, "bagging_freq": 1, "feature_fraction": 0.5,
                                "min_data_in_leaf": 5}),
    ("xgboost", "rank:ndcg", {"subsample": 0.5, "colsample_bytree": 0.5}),
])
def test_gbdt_seed_limits_are_where_the_libraries_start_aliasing(letor_files, library, objective, params):
    # The limit itself still gives its own model; one above it gives the model of a smaller seed,
    # which is why fit_gbdt and the spec check refuse it.
    from smoothrank.experiments.gbdt import SEED_LIMITS

    train = load_letor(letor_files / "train.txt")
    limit = SEED_LIMITS[library]

    def scores(seed: int) -> np.ndarray:
        return fit_gbdt(train, None, library=library, objective=objective, params=params, num_boost_round=4,
                        early_stopping_rounds=None, seed=seed).predict(train)

    assert not np.array_equal(scores(0), scores(limit))
    assert not np.array_equal(scores(0), scores(1))
    with pytest.raises(ConfigError, match=f"seed: {library} keeps seeds 0..{limit}"):
        scores(limit + 1)
    # The library itself, past the harness's check: the aliasing that the check prevents.
    if library == "lightgbm":
        import lightgbm as lgb

        def raw(seed: int) -> np.ndarray:
            ds = lgb.Dataset(train.features, label=train.labels, group=np.diff(train.offsets))
            booster = lgb.train({"objective": objective, "seed": seed, "verbosity": -1, **params}, ds, 4)
            return booster.predict(train.features)
    else:
        import xgboost as xgb

        def raw(seed: int) -> np.ndarray:
            dm = xgb.DMatrix(train.features, label=train.labels)
            dm.set_group(np.diff(train.offsets))
            booster = xgb.train({"objective": objective, "seed": seed, "verbosity": 0, **params}, dm, 4)
            return booster.predict(dm)
    np.testing.assert_array_equal(raw(limit + 1), raw(0))


def test_a_method_missing_folds_is_marked_and_never_the_pick():
    # A review found a method averaged over 2 of 3 folds (a failed run) shown unmarked beside
    # 3-fold methods, and first in the table against the published rows.
    results = []
    for f in (1, 2, 3):
        for method, value in (("full", 0.4), ("partial", 0.9)):
            if method == "partial" and f == 3:
                continue
            r = _fake(method, f, [value, value + 0.1], 0.5)
            for m in ("ndcg@3", "ndcg@5", "map"):
                r["metrics"]["test"][m] = value + 0.05
                r["per_query"][m] = [value, value + 0.1]
            r["metrics"]["valid"] = {"ndcg@10": value}
            results.append(r)
    metrics = ["ndcg@1", "ndcg@3", "ndcg@5", "map"]
    rows = summarize(results, metrics=metrics)
    published = {"P": {"ndcg@1": 0.1, "ndcg@3": 0.1, "ndcg@5": 0.1, "map": 0.1}}
    table = published_comparison(rows, "mq2008", published, select_by="ndcg@10")
    assert [(r["method"], r["n_folds"], r["beats_all"]) for r in table] == [("full", 3, True),
                                                                             ("partial", 2, False)]
    text = format_markdown(rows, metrics=metrics, title="T", convention="letor4", baseline=None, alpha=0.05,
                           select_by="ndcg@10")
    assert "| partial (2 of 3 folds) |" in text and "| full |" in text
    assert "Sampling noise of the first row, `full`" in text


def test_unreadable_scores_say_to_delete_the_folder(tmp_path):
    # Deleting scores.npz alone leaves a GBDT run that cannot recompute them (no model is kept);
    # a review found the hint led there. Deleting the run folder redoes the run.
    from smoothrank.experiments.ensemble import read_scores

    path = tmp_path / "runs" / "r1" / "scores.npz"
    path.parent.mkdir(parents=True)
    from smoothrank.experiments.ensemble import write_scores

    write_scores(path, {"test": np.arange(50.0), "valid": np.arange(50.0)})
    whole = path.read_bytes()
    # garbage, a truncated zip (BadZipFile), an empty file (EOFError): each a SmoothrankError
    for content in (b"not an npz", whole[:300], b""):
        path.write_bytes(content)
        with pytest.raises(SmoothrankError, match=rf"unreadable scores .*; delete its folder "
                                                  rf"{re.escape(str(path.parent))} to redo that run"):
            read_scores(path)


def test_a_member_with_non_finite_scores_names_its_file_and_split(letor_files, tmp_path):
    from smoothrank.experiments.ensemble import SCORES_FILE, read_scores, write_scores

    data = _spec_dict(letor_files, gbdt=[], baseline=None, seeds=[0, 1], ensemble=True,
                      neural={"training": {"epochs": 1, "batch_size": 16, "list_size": 10}})
    spec = spec_from_dict(data)
    out = tmp_path / "out"
    run_experiment(spec, out)
    run_dir = next((out / "runs").iterdir())
    scores = read_scores(run_dir / SCORES_FILE)
    scores["test"][3] = np.nan
    write_scores(run_dir / SCORES_FILE, scores)
    shutil.rmtree(out / "ensembles")
    outcome = run_experiment(spec, out)
    (message,) = outcome.failed.values()
    assert f"{run_dir / SCORES_FILE}: 1 non-finite test score(s); delete the run folder" in message


def test_a_method_missing_a_seed_run_is_marked_too():
    results = [_fake("full", f, [0.4, 0.5], 0.5, seed=s) for f in (1, 2) for s in (0, 1)]
    results += [_fake("partial", f, [0.9, 0.8], 0.5, seed=s) for f, s in ((1, 0), (1, 1), (2, 0))]
    for r in results:
        r["metrics"]["valid"] = {"ndcg@10": 0.9 if r["method"] == "partial" else 0.4}
    rows = summarize(results, metrics=["ndcg@1"])
    text = format_markdown(rows, metrics=["ndcg@1"], title="T", convention="trec", baseline=None, alpha=0.05)
    assert "| partial (3 of 4 runs) |" in text and "| full |" in text


def test_seeds_are_averaged_within_a_fold():
    results = [_fake("m", 1, [0.2, 0.4], 0.1, seed=0), _fake("m", 1, [0.4, 0.6], 0.3, seed=1)]
    row = next(r for r in summarize(results, metrics=["ndcg@1"]) if r["split"] == "train")
    assert row["mean"] == pytest.approx(0.2) and row["n_folds"] == 1 and row["n_runs"] == 2


# ------------------------------------------------------------------------------ runner
def test_runner_is_resumable(letor_files, tmp_path):
    spec = spec_from_dict(_spec_dict(letor_files))
    out = tmp_path / "out"
    first = run_experiment(spec, out)
    assert len(first.ran) == 2 and first.skipped == []
    stored = {r["run_id"]: r for r in load_results(out)}
    assert set(stored) == set(first.ran)
    neural = stored["synthetic--files--neural_ndcg-linear--seed0"]
    assert 1 <= neural["selection"]["best_epoch"] <= 2
    assert len(neural["per_query"]["qids"]) == 15 and len(neural["per_query"]["ndcg@10"]) == 15
    assert set(neural["metrics"]) == {"train", "valid", "test"}
    mtimes = {p: p.stat().st_mtime_ns for p in out.glob("runs/*/result.json")}

    second = run_experiment(spec, out)
    assert second.ran == [] and sorted(second.skipped) == sorted(first.ran)
    assert {p: p.stat().st_mtime_ns for p in out.glob("runs/*/result.json")} == mtimes
    assert [r["metrics"] for r in second.results] == [r["metrics"] for r in first.results]

    # One result removed: only that run is redone, with the same numbers (seeded).
    gbdt_result = out / "runs" / "synthetic--files--lightgbm-lambdarank--seed0" / "result.json"
    before = json.loads(gbdt_result.read_text())
    gbdt_result.unlink()
    third = run_experiment(spec, out)
    assert third.ran == ["synthetic--files--lightgbm-lambdarank--seed0"]
    assert json.loads(gbdt_result.read_text())["metrics"] == before["metrics"]

    # The spec changed under a finished run: refuse to mix stale results.
    changed = spec_from_dict(_spec_dict(letor_files, gbdt=[{"library": "lightgbm", "objective": "lambdarank",
                                                            "num_boost_round": 16}]))
    with pytest.raises(ConfigError, match="other settings"):
        run_experiment(changed, out)


def test_a_moved_experiment_resumes_and_changed_data_is_stale(letor_files, tmp_path):
    # Data files enter the fingerprint by content: copy data and results elsewhere, resume there.
    import shutil

    data_a = shutil.copytree(letor_files, tmp_path / "a" / "data")
    spec_a = spec_from_dict(_spec_dict(data_a, losses=[], models=[]))
    run_experiment(spec_a, tmp_path / "a" / "out")
    data_b = shutil.copytree(data_a, tmp_path / "b" / "data")
    out_b = shutil.copytree(tmp_path / "a" / "out", tmp_path / "b" / "out")
    spec_b = spec_from_dict(_spec_dict(data_b, losses=[], models=[]))
    assert [c.fingerprint() for c in expand(spec_b)] == [c.fingerprint() for c in expand(spec_a)]
    moved = run_experiment(spec_b, out_b)
    assert moved.ran == [] and moved.skipped == ["synthetic--files--lightgbm-lambdarank--seed0"]
    # Same paths, other contents: the finished run is stale.
    test_file = data_b / "test.txt"
    test_file.write_text(test_file.read_text().replace("2 qid:", "1 qid:", 1))
    with pytest.raises(ConfigError, match="other settings"):
        run_experiment(spec_from_dict(_spec_dict(data_b, losses=[], models=[])), out_b)


def test_a_query_side_file_enters_the_fingerprint(tmp_path):
    # An audit (2026-11-25): the fingerprint hashed the data files only, while the reader takes the
    # query sizes of a file without qid: tokens from its .query side file; two queries merged there
    # left the fingerprint as it was, and --reuse and resume took the stale run.
    import re

    rows = {"train.txt": 12, "vali.txt": 6, "test.txt": 6}
    for name, n in rows.items():
        (tmp_path / name).write_text("".join(f"{i % 2} 1:{i} 2:{i % 3}\n" for i in range(n)))
        (tmp_path / f"{name}.query").write_text("3\n" * (n // 3))

    def fingerprints() -> list[str]:
        return [c.fingerprint() for c in expand(spec_from_dict(_spec_dict(tmp_path, losses=[], models=[])))]

    before = fingerprints()
    (tmp_path / "test.txt.query").write_text("6\n")  # the two test queries merged
    assert fingerprints() != before
    # A side file the reader does not read (the data file has qid: tokens) is not part of it.
    for name in rows:
        lines = (tmp_path / name).read_text().splitlines()
        (tmp_path / name).write_text("".join(re.sub(r"^(\d) ", rf"\1 qid:{i // 3} ", line) + "\n"
                                             for i, line in enumerate(lines)))
    with_qid = fingerprints()
    (tmp_path / "test.txt.query").write_text("1\n" * 6)
    assert fingerprints() == with_qid


def test_parallel_workers_match_serial(letor_files, tmp_path):
    data = _spec_dict(letor_files, losses=[], models=[], baseline=None)
    data["gbdt"].append({"library": "xgboost", "objective": "rank:ndcg", "num_boost_round": 10})
    spec = spec_from_dict(data)
    serial = run_experiment(spec, tmp_path / "serial")
    parallel = run_experiment(spec, tmp_path / "parallel", workers=2)
    assert sorted(parallel.ran) == sorted(serial.ran)
    assert [r["metrics"] for r in parallel.results] == [r["metrics"] for r in serial.results]


def test_cli_experiment(letor_files, tmp_path, capsys):
    spec_path = tmp_path / "grid.yaml"
    spec_path.write_text(yaml.safe_dump(_spec_dict(letor_files, losses=[], models=[], baseline=None)))
    out = tmp_path / "out"
    assert cli_main(["experiment", str(spec_path), "--out", str(out), "--quiet"]) == 0
    assert "1 run(s) done, 0 skipped" in capsys.readouterr().out
    written = {p.name for p in out.iterdir()}
    assert written >= {"summary.md", "summary.csv", "summary.json", "spec.yaml", "runs"}
    assert cli_main(["experiment", str(spec_path), "--out", str(out), "--quiet"]) == 0
    assert "0 run(s) done, 1 skipped" in capsys.readouterr().out
    assert cli_main(["experiment", str(spec_path), "--out", str(out), "--dry-run"]) == 0
    assert "finished" in capsys.readouterr().out
    assert cli_main(["experiment", str(tmp_path / "missing.yaml")]) == 2
    assert "missing.yaml" in capsys.readouterr().err
    for bad in ("0", "-1", "two", "1.5"):
        assert cli_main(["experiment", str(spec_path), "--workers", bad]) == 2
        assert "--workers: expected an integer >= 1 or 'auto'" in capsys.readouterr().err
    # auto: every finished run is skipped whatever the worker count; the count follows the CPUs.
    assert cli_main(["experiment", str(spec_path), "--out", str(out), "--quiet", "--workers", "auto"]) == 0
    assert "0 run(s) done, 1 skipped" in capsys.readouterr().out
    # --correction overrides the spec's for the summaries only (runs are skipped, summaries rewritten).
    assert json.loads((out / "summary.json").read_text())["correction"] == "none"
    assert cli_main(["experiment", str(spec_path), "--out", str(out), "--quiet", "--correction", "holm"]) == 0
    assert json.loads((out / "summary.json").read_text())["correction"] == "holm"


def test_workers_auto_divides_the_usable_cpus(monkeypatch):
    from smoothrank.cli import experiment as cli_experiment

    monkeypatch.setattr(cli_experiment, "_usable_cpus", lambda: 16)
    assert cli_experiment._workers("auto", 1) == 16
    assert cli_experiment._workers("auto", 4) == 4
    assert cli_experiment._workers("auto", 32) == 1  # never 0
    assert cli_experiment._workers("3", 8) == 3  # an explicit count is taken as given


def test_compare_two_methods_against_scipy(tmp_path, capsys):
    from scipy.stats import ttest_rel

    rng = np.random.default_rng(3)
    a = {f: rng.uniform(size=20).round(3).tolist() for f in (1, 2)}
    b = {f: rng.uniform(size=20).round(3).tolist() for f in (1, 2)}
    results = [_fake("a", f, a[f], 0.5) for f in (1, 2)] + [_fake("b", f, b[f], 0.5) for f in (1, 2)]
    for r in results:
        write_json(tmp_path / "runs" / f"{r['method']}-{r['fold']}" / "result.json", r)
    reference = ttest_rel(a[1] + a[2], b[1] + b[2])
    test = compare_methods(results, "a", "b", metrics=["ndcg@1"])["ndcg@1"]
    assert test.n == 40 and test.pvalue == pytest.approx(reference.pvalue, rel=1e-6)
    assert test.statistic == pytest.approx(reference.statistic, rel=1e-9)
    assert cli_main(["compare", str(tmp_path), "a", "b", "--metrics", "ndcg@1", "--format", "json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["ndcg@1"]["p_value"] == pytest.approx(reference.pvalue, rel=1e-6)
    interval = reference.confidence_interval(0.95)
    assert printed["ndcg@1"]["interval"] == [pytest.approx(interval.low), pytest.approx(interval.high)]
    assert cli_main(["compare", str(tmp_path), "a", "b", "--metrics", "ndcg@1", "--alpha", "0.1"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[1].endswith("| 90% interval |")
    interval = reference.confidence_interval(0.9)
    assert table[3].endswith(f"| [{interval.low:+.4f}, {interval.high:+.4f}] |")
    assert cli_main(["compare", str(tmp_path), "a", "nope"]) == 2
    assert "method_b" in capsys.readouterr().err
    assert cli_main(["compare", str(tmp_path / "nowhere"), "a", "b"]) == 2
    # --b-out: method B from another experiment on the same data; a label may be in both.
    other = tmp_path / "other"
    for f in (1, 2):
        write_json(other / "runs" / f"a-{f}" / "result.json", _fake("a", f, b[f], 0.5))
    capsys.readouterr()
    assert cli_main(["compare", str(tmp_path), "a", "a", "--b-out", str(other), "--metrics", "ndcg@1",
                     "--format", "json"]) == 0
    across = json.loads(capsys.readouterr().out)["ndcg@1"]
    assert across["p_value"] == pytest.approx(reference.pvalue, rel=1e-6)
    assert cli_main(["compare", str(tmp_path), "a", "b", "--b-out", str(other)]) == 2
    assert f"no finished run of 'b' in {other}" in capsys.readouterr().err
    write_json(other / "runs" / "a-1" / "result.json", {**_fake("a", 1, b[1], 0.5), "dataset": "mslr"})
    assert cli_main(["compare", str(tmp_path), "a", "a", "--b-out", str(other)]) == 2
    assert "pair only on the same data" in capsys.readouterr().err


def test_compare_alpha_sets_the_verdict_and_the_json_interval(tmp_path, capsys):
    from scipy.stats import ttest_rel

    rng = np.random.default_rng(5)
    a, b = rng.uniform(size=30).round(3).tolist(), rng.uniform(size=30).round(3).tolist()
    for r in (_fake("a", 1, a, 0.5), _fake("b", 1, b, 0.5)):
        write_json(tmp_path / "runs" / r["method"] / "result.json", r)
    reference = ttest_rel(a, b)
    p = float(reference.pvalue)
    assert 0.05 < p < 0.9  # --alpha, not the default 0.05, must decide on each side of p
    for alpha, verdict in ((p + (1 - p) / 2, "yes"), (p / 2, "no")):
        args = ["compare", str(tmp_path), "a", "b", "--metrics", "ndcg@1", "--alpha", f"{alpha:.6f}"]
        assert cli_main(args) == 0
        row = capsys.readouterr().out.splitlines()[3].split("|")
        assert row[6].strip() == verdict, (alpha, row)
    assert cli_main(["compare", str(tmp_path), "a", "b", "--metrics", "ndcg@1", "--alpha", "0.2",
                     "--format", "json"]) == 0
    interval = reference.confidence_interval(0.8)
    printed = json.loads(capsys.readouterr().out)["ndcg@1"]
    assert printed["interval"] == [pytest.approx(interval.low), pytest.approx(interval.high)]


def test_an_output_folder_in_use_by_another_command_is_refused(letor_files, tmp_path, capsys):
    # Two commands on one folder ran every cell twice (and could delete each other's temporary files).
    from conftest import folder_held_by_another_process

    data = _spec_dict(letor_files, losses=[], models=[], baseline=None)
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(data))
    out = tmp_path / "out"
    out.mkdir()
    with folder_held_by_another_process(out, tmp_path):
        assert cli_main(["experiment", str(spec_path), "--out", str(out), "--quiet"]) == 2
        assert f"{out} is in use by another smoothrank process (an experiment)" in capsys.readouterr().err
        assert list(out.iterdir()) == []  # not even spec.yaml
        assert cli_main(["experiment", str(spec_path), "--out", str(out), "--dry-run"]) == 0  # reads only
    assert cli_main(["experiment", str(spec_path), "--out", str(out), "--quiet"]) == 0


def test_compare_keeps_to_the_runs_of_the_folders_spec(letor_files, tmp_path, capsys):
    # Runs of seeds a spec no longer has stay in the folder; compare paired them in, unlike the summary.
    gbdt = [{"library": "lightgbm", "objective": objective, "num_boost_round": 10,
             "params": {"min_data_in_leaf": 5, "bagging_fraction": 0.6, "bagging_freq": 1}}
            for objective in ("lambdarank", "rank_xendcg")]
    both, one = (_spec_dict(letor_files, losses=[], models=[], gbdt=gbdt, baseline=None, seeds=seeds)
                 for seeds in ([0, 1], [0]))
    folders = {}
    for name, data in (("both", both), ("one", one), ("shrunk", both)):
        spec_path = tmp_path / f"{name}.yaml"
        spec_path.write_text(yaml.safe_dump(data))
        folders[name] = tmp_path / name
        assert cli_main(["experiment", str(spec_path), "--out", str(folders[name]), "--quiet"]) == 0
    (tmp_path / "shrunk.yaml").write_text(yaml.safe_dump(one))  # the same folder, seed 1 dropped
    assert cli_main(["experiment", str(tmp_path / "shrunk.yaml"), "--out", str(folders["shrunk"]),
                     "--quiet"]) == 0
    capsys.readouterr()

    def compared(folder: Path, *extra: str) -> dict:
        assert cli_main(["compare", str(folder), "lightgbm-lambdarank", "lightgbm-rank_xendcg",
                         "--metrics", "ndcg@5", "--format", "json", *extra]) == 0
        return json.loads(capsys.readouterr().out)["ndcg@5"]

    assert compared(folders["shrunk"]) == compared(folders["one"])
    # ... which matters: seed 1's runs change the comparison (seed runs are averaged per query).
    assert compared(folders["both"])["mean_difference"] != compared(folders["one"])["mean_difference"]
    assert compared(folders["shrunk"], "--all-runs") == compared(folders["both"])
    # Two specs, one method each, written into one folder: the first one's runs are named, not lost.
    for objective in ("lambdarank", "rank_xendcg"):
        only = _spec_dict(letor_files, losses=[], models=[], baseline=None, seeds=[0],
                          gbdt=[g for g in gbdt if g["objective"] == objective])
        (tmp_path / "only.yaml").write_text(yaml.safe_dump(only))
        assert cli_main(["experiment", str(tmp_path / "only.yaml"), "--out", str(tmp_path / "mixed"),
                         "--quiet"]) == 0
    capsys.readouterr()
    assert cli_main(["compare", str(tmp_path / "mixed"), "lightgbm-lambdarank", "lightgbm-rank_xendcg"]) == 2
    err = capsys.readouterr().err
    assert "method_a: the runs of 'lightgbm-lambdarank'" in err and "--all-runs" in err, err
    assert compared(tmp_path / "mixed", "--all-runs") == compared(folders["one"])


def test_compare_names_the_runners_plan_file():
    from smoothrank.cli import compare
    from smoothrank.experiments import runner

    assert compare.PLAN_FILE == runner.PLAN_FILE  # two definitions: the CLI does not import the runner


def test_compare_pairs_queries_within_a_dataset():
    """Two datasets of one experiment with the same folds and query ids (e.g. MQ2007 and MQ2008):
    a query of one dataset never pairs with the same id of the other."""
    from scipy.stats import ttest_rel

    rng = np.random.default_rng(5)
    values = {(m, d): rng.uniform(size=20).round(3).tolist() for m in "ab" for d in ("mq2007", "mq2008")}
    results = [{**_fake(m, 1, values[(m, d)], 0.5), "dataset": d} for m in "ab" for d in ("mq2007", "mq2008")]
    test = compare_methods(results, "a", "b", metrics=["ndcg@1"])["ndcg@1"]
    reference = ttest_rel(values[("a", "mq2007")] + values[("a", "mq2008")],
                          values[("b", "mq2007")] + values[("b", "mq2008")])
    assert test.n == 40 and test.pvalue == pytest.approx(reference.pvalue, rel=1e-6)
    # b run on the other dataset only: no common query, although folds and query ids agree.
    only = [r for r in results if (r["method"], r["dataset"]) in {("a", "mq2007"), ("b", "mq2008")}]
    with pytest.raises(SmoothrankError, match="no common test queries"):
        compare_methods(only, "a", "b", metrics=["ndcg@1"])


def test_compare_states_the_metric_convention(tmp_path, capsys):
    # The table's header line and the JSON name the convention the runs were scored under (each
    # result.json records it); every top-level JSON key is still a metric.
    def put(out: Path, method: str, fold: int, values: list[float], convention: str | None) -> None:
        result = _fake(method, fold, values, 0.5)
        if convention is not None:
            result["convention"] = convention
        write_json(out / "runs" / f"{method}-{fold}" / "result.json", result)

    rng = np.random.default_rng(4)
    for method in ("a", "b"):
        for fold in (1, 2):
            put(tmp_path, method, fold, rng.uniform(size=10).round(3).tolist(), "lightgbm")
    assert cli_main(["compare", str(tmp_path), "a", "b"]) == 0
    header = capsys.readouterr().out.splitlines()[0]
    assert header == "a - b, paired t-test over test queries (two-sided), convention lightgbm"
    assert cli_main(["compare", str(tmp_path), "a", "b", "--format", "json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert list(printed) == ["ndcg@1"] and printed["ndcg@1"]["convention"] == "lightgbm"
    assert set(printed["ndcg@1"]) == {"mean_difference", "t", "p_value", "n_queries", "convention",
                                      "interval", "datasets"}
    # --b-out: the same convention on both sides (a different one is refused).
    other = tmp_path / "other"
    for fold in (1, 2):
        put(other, "b", fold, [0.5] * 10, "lightgbm")
    assert cli_main(["compare", str(tmp_path), "a", "b", "--b-out", str(other), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["ndcg@1"]["convention"] == "lightgbm"
    put(other, "b", 1, [0.5] * 10, "trec")
    assert cli_main(["compare", str(tmp_path), "a", "b", "--b-out", str(other)]) == 2
    assert "convention" in capsys.readouterr().err
    # One folder holding runs of two specs with other conventions (a review found these paired):
    # refused, whether the two methods differ in convention or one method's runs do.
    mixed = tmp_path / "mixed"
    for fold in (1, 2):
        put(mixed, "a", fold, [0.1] * 10, "letor4")
        put(mixed, "b", fold, [0.5] * 10, "trec")
    assert cli_main(["compare", str(mixed), "a", "b"]) == 2
    assert "compare: a has convention ['letor4'] but b has ['trec']" in capsys.readouterr().err
    put(mixed, "b", 2, [0.5] * 10, "letor4")
    assert cli_main(["compare", str(mixed), "a", "b"]) == 2
    assert "the runs of b were scored under several metric conventions" in capsys.readouterr().err
    # --b-out with a method_a that OUT lacks: the message lists OUT's methods.
    assert cli_main(["compare", str(tmp_path), "nope", "b", "--b-out", str(other)]) == 2
    assert f"no finished run of 'nope' in {tmp_path}; methods: ['a', 'b']" in capsys.readouterr().err
    # Results that do not record one (hand-made): said so, null in JSON.
    bare = tmp_path / "bare"
    for method in ("a", "b"):
        put(bare, method, 1, [0.1, 0.5, 0.7], None)
    assert cli_main(["compare", str(bare), "a", "b"]) == 0
    assert capsys.readouterr().out.splitlines()[0].endswith(", convention not recorded")
    assert cli_main(["compare", str(bare), "a", "b", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["ndcg@1"]["convention"] is None


def test_shallow_training_discount(letor_files, tmp_path):
    # SoftRank section 4.7: a shallower discount, given in YAML as {shallow: ALPHA, n: N}.
    loss = {"name": "approx_ndcg", "label": "approx_shallow",
            "options": {"discount": {"shallow": 0.0, "n": 10}}}
    spec = spec_from_dict(_spec_dict(letor_files, losses=[loss], gbdt=[], baseline=None,
                                     neural={"training": {"epochs": 1, "batch_size": 16, "list_size": 10}}))
    outcome = run_experiment(spec, tmp_path / "out")
    (result,) = outcome.results
    assert result["method"] == "approx_shallow-linear"
    assert all(math.isfinite(v) for v in result["metrics"]["test"].values())
    train_dir = tmp_path / "out" / "runs" / result["run_id"] / "train"
    saved = yaml.safe_load((train_dir / "config.yaml").read_text())
    assert saved["loss"]["options"]["discount"] == {"shallow": 0.0, "n": 10}


@pytest.mark.parametrize("library", ["lightgbm", "xgboost"])
def test_gbdt_early_stopping_on_a_custom_criterion(letor_files, library):
    train = load_letor(letor_files / "train.txt")
    valid = load_letor(letor_files / "vali.txt")

    def criterion(scores: np.ndarray) -> float:
        per_query = evaluate_flat(scores, valid.labels, offsets=valid.offsets, metrics=["ndcg@3"],
                                  convention="letor4")
        return mean_metrics(per_query)["ndcg@3"]

    objective = "lambdarank" if library == "lightgbm" else "rank:ndcg"
    fitted = fit_gbdt(train, valid, library=library, objective=objective, num_boost_round=60,
                      early_stopping_rounds=8, select=criterion, select_name="crit")
    curve = [row["valid_crit"] for row in fitted.history]
    assert len(curve) == fitted.rounds_run
    # The kept iteration is the best one seen, and predicting with it reproduces that value.
    assert curve[fitted.best_iteration - 1] == pytest.approx(max(curve))
    assert criterion(fitted.predict(valid)) == pytest.approx(max(curve), abs=1e-6)


def test_failed_run_is_reported_and_retried(letor_files, tmp_path, capsys):
    root = tmp_path / "data"
    root.mkdir()
    for name in ("train.txt", "vali.txt"):
        (root / name).write_text((letor_files / name).read_text())
    good_test = (letor_files / "test.txt").read_text()
    (root / "test.txt").write_text(good_test + "1 qid:999 1:oops\n")
    data = _spec_dict(root, losses=[], models=[], baseline=None)
    spec_path = tmp_path / "grid.yaml"
    spec_path.write_text(yaml.safe_dump(data))
    out = tmp_path / "out"
    outcome = run_experiment(spec_from_dict(data), out)
    assert outcome.results == [] and list(outcome.failed) == ["synthetic--files--lightgbm-lambdarank--seed0"]
    assert "test.txt" in next(iter(outcome.failed.values()))
    assert not list(out.glob("runs/*/result.json"))
    assert cli_main(["experiment", str(spec_path), "--out", str(out), "--quiet"]) == 1
    assert "1 run(s) failed" in capsys.readouterr().err
    (root / "test.txt").write_text(good_test)  # fixed: the next invocation retries the run
    assert cli_main(["experiment", str(spec_path), "--out", str(out), "--quiet"]) == 0
    assert "1 run(s) done, 0 skipped" in capsys.readouterr().out


def test_interrupted_neural_run_resumes_from_its_checkpoint(letor_files, tmp_path):
    from smoothrank.datasets import load_splits
    from smoothrank.training import train
    from smoothrank.training.config import config_from_dict

    data = _spec_dict(letor_files, gbdt=[], baseline=None,
                      neural={"training": {"epochs": 3, "batch_size": 16, "list_size": 10}})
    spec = spec_from_dict(data)
    (cell,) = expand(spec)
    # An interruption after epoch 1: the trainer's checkpoint exists, result.json does not.
    splits = load_splits(cell.settings["config"]["data"])
    splits.pop("test")
    train_dir = tmp_path / "resumed" / "runs" / cell.run_id / "train"
    train(config_from_dict(cell.settings["config"]), run_dir=train_dir, splits=splits, quiet=True,
          stop_after_epoch=1)
    assert (train_dir / "checkpoint.pt").is_file()
    resumed = run_experiment(spec, tmp_path / "resumed").results[0]
    fresh = run_experiment(spec, tmp_path / "fresh").results[0]
    assert resumed["selection"]["resumed"] is True and fresh["selection"]["resumed"] is False
    assert resumed["selection"]["epochs_run"] == 3
    assert resumed["metrics"] == fresh["metrics"]
    # The trainer never saw the test split: its own summary has no test metrics.
    summary = json.loads((train_dir / "summary.json").read_text())
    assert summary["test"] == {}


def test_an_interrupted_run_of_other_settings_is_refused_before_the_grid(letor_files, tmp_path, capsys):
    # A review found that such a run failed in every later attempt ("--resume: the configuration
    # differs"), after spec.yaml had been replaced; now the folder is refused up front, dry run too.
    from smoothrank.datasets import load_splits
    from smoothrank.training import train
    from smoothrank.training.config import config_from_dict

    data = _spec_dict(letor_files, gbdt=[], baseline=None,
                      neural={"training": {"epochs": 3, "batch_size": 16, "list_size": 10}})
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(data))
    (cell,) = expand(spec_from_dict(data))
    splits = load_splits(cell.settings["config"]["data"])
    splits.pop("test")
    out = tmp_path / "out"
    train_dir = out / "runs" / cell.run_id / "train"
    train(config_from_dict(cell.settings["config"]), run_dir=train_dir, splits=splits, quiet=True,
          stop_after_epoch=1)
    assert cli_main(["experiment", str(spec_path), "--out", str(out), "--dry-run"]) == 0
    assert capsys.readouterr().out.startswith(f"{cell.run_id}\tto run (resumes from its checkpoint)")
    data["neural"]["optimizer"] = {"lr": 0.05}
    spec_path.write_text(yaml.safe_dump(data))
    for extra in (["--dry-run"], ["--quiet"]):
        assert cli_main(["experiment", str(spec_path), "--out", str(out), *extra]) == 2
        err = capsys.readouterr().err
        assert f"{out / 'runs' / cell.run_id}: an interrupted run made with other settings" in err
        assert "optimizer.lr" in err and "delete the run folder" in err
    assert not (out / "spec.yaml").exists() and not (out / "summary.md").exists()


def test_an_interrupted_run_resumes_only_on_the_same_data_and_settings(letor_files, tmp_path, capsys):
    # A review found interrupted runs checked by their checkpoint's config, which holds the data
    # *paths*: new data at the same path resumed the old training (a result of neither), another
    # num_threads resumed too, and a folder copied with its data elsewhere was refused. The run's
    # fingerprint (data by contents) is now recorded in cell.json when it starts, and compared.
    import shutil

    data_dir = tmp_path / "a" / "data"
    shutil.copytree(letor_files, data_dir)
    data = _spec_dict(data_dir, gbdt=[], baseline=None)
    spec_path = tmp_path / "a" / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(data))
    out = tmp_path / "a" / "out"
    assert cli_main(["experiment", str(spec_path), "--out", str(out), "--quiet"]) == 0
    (cell,) = expand(spec_from_dict(data))
    run_dir = out / "runs" / cell.run_id
    finished = json.loads((run_dir / "result.json").read_text())
    assert json.loads((run_dir / "cell.json").read_text())["fingerprint"] == cell.fingerprint()

    def interrupt(folder: Path) -> None:  # as if killed after its last checkpoint
        (folder / "runs" / cell.run_id / "result.json").unlink()
        (folder / "runs" / cell.run_id / "scores.npz").unlink()

    # Copied elsewhere with its data (other paths, same contents): resumes to the same result.
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    interrupt(tmp_path / "b" / "out")
    moved = _spec_dict(tmp_path / "b" / "data", gbdt=[], baseline=None)
    (tmp_path / "b" / "spec.yaml").write_text(yaml.safe_dump(moved))
    assert cli_main(["experiment", str(tmp_path / "b" / "spec.yaml"), "--out", str(tmp_path / "b" / "out"),
                     "--quiet"]) == 0
    capsys.readouterr()
    again = json.loads((tmp_path / "b" / "out" / "runs" / cell.run_id / "result.json").read_text())
    assert again["selection"]["resumed"] is True and again["metrics"] == finished["metrics"]

    interrupt(out)
    # Other training data at the same path, or another thread count: refused, dry run too.
    train_file = data_dir / "train.txt"
    original = train_file.read_text()
    train_file.write_text(original.replace("qid:", "qid:9", 1))
    threads = {**data, "num_threads": 2}
    for changed, fragment in ((data, "settings.config.data.train"), (threads, "num_threads")):
        spec_path.write_text(yaml.safe_dump(changed))
        for extra in (["--dry-run"], ["--quiet"]):
            assert cli_main(["experiment", str(spec_path), "--out", str(out), *extra]) == 2
            err = capsys.readouterr().err
            assert "an interrupted run made with other settings or data" in err and fragment in err, err
        train_file.write_text(original)
    # The Python API, which does not check the folder first, fails that run instead of mixing.
    outcome = run_experiment(spec_from_dict(threads), out)
    assert list(outcome.failed) == [cell.run_id] and "num_threads" in outcome.failed[cell.run_id]
    assert not (run_dir / "result.json").exists()


@pytest.mark.parametrize(("name", "n_runs"), [("mq2008", 140), ("mq2008_ensemble", 100),
                                              ("mq2008_ensemble_map", 100), ("mq2008_gbdt_fold1", 4),
                                              ("mq2008_mlp", 80), ("mq2008_mlp_long", 80),
                                              ("mq2008_linear", 60), ("mq2008_blend", 175),
                                              ("mq2008_stack", 175), ("mq2008_refit", 175),
                                              ("mq2008_neuralndcg_recheck", 35),
                                              ("mq2008_boosting", 60), ("mq2008_boosting_lr", 150),
                                              ("mq2008_boosting_curvature", 95),
                                              ("mq2008_stack_boosted", 225),
                                              ("mq2008_lambdarank_bagged", 75),
                                              ("mq2008_list_mle_boosted_hessians", 75),
                                              ("mq2008_refit_boosted", 50),
                                              ("mq2008_boosted_trees", 800),
                                              ("mq2008_ensemble_size", 300), ("mq2008_boosted_map", 75),
                                              ("mq2008_threads", 45),
                                              ("lightgbm_example", 13),
                                              ("lightgbm_example_boosting", 21),
                                              ("mslr_sample", 6)])
def test_shipped_specs_are_valid(shared_dir, name, n_runs, monkeypatch):
    # The shipped specs must keep validating as the losses and the trainer evolve. Their file
    # datasets name ${SMOOTHRANK_SHARED:-../../shared}: point the variable at the shared folder.
    monkeypatch.setenv("SMOOTHRANK_SHARED", str(shared_dir))
    spec = load_spec(Path(__file__).resolve().parent.parent / "experiments" / f"{name}.yaml")
    cells = expand(spec)
    assert len(cells) == n_runs
    assert spec.baseline in {c.method for c in cells}


# ------------------------------------------------------------------------------ GBDT pitfalls
def _write_rows(path: Path, qids: list, rng: np.random.Generator, *, levels: tuple = (0.0, 0.8, 1.5)) -> Path:
    """One LETOR line per entry of ``qids`` (in that order); labels from feature 1 plus noise."""
    lines = []
    for q in qids:
        x = rng.normal(size=4)
        label = int(np.digitize(x[0] + rng.normal(), levels))
        lines.append(f"{label} qid:{q} " + " ".join(f"{j + 1}:{v:.5f}" for j, v in enumerate(x)))
    path.write_text("\n".join(lines) + "\n")
    return path


def _query_sizes_from_text(path: Path) -> list[int]:
    """Rows per query, queries in order of first appearance: read from the file text itself."""
    sizes: dict[str, int] = {}
    for line in path.read_text().splitlines():
        qid = line.split()[1]
        sizes[qid] = sizes.get(qid, 0) + 1
    return list(sizes.values())


@pytest.mark.parametrize(("library", "objective"), [
    ("lightgbm", "lambdarank"), ("lightgbm", "rank_xendcg"),
    ("xgboost", "rank:pairwise"), ("xgboost", "rank:ndcg"),
])
def test_gbdt_groups_rows_by_query_for_unsorted_and_interleaved_qids(tmp_path, monkeypatch, library,
                                                                     objective):
    """PITFALLS 19 and 20. LightGBM reads no ``qid:`` from LibSVM files and takes group sizes (its
    LGBMRanker hands them to a custom objective only with exactly four parameters); XGBoost needs
    rows sorted by qid (its XGBRanker refuses callable objectives). smoothrank reads the qids itself
    and calls ``lgb.train`` / ``xgb.train`` with built-in objectives: the groups handed to the library
    are the file's queries (qids unsorted, numeric or not, and interleaved rows regrouped), and the
    library's own NDCG on the validation split equals ours on the true queries."""
    rng = np.random.default_rng(7)
    sizes = rng.integers(2, 12, 40)
    order = rng.permutation(np.arange(1000, 1040))
    train_qids = [q for q, n in zip(order, sizes, strict=True) for _ in range(n)]
    train_path = _write_rows(tmp_path / "train.txt", train_qids, rng)  # qids in no order at all
    valid_qids = [f"q{rng.integers(0, 20)}" for _ in range(150)]       # rows of 20 queries, interleaved
    valid_path = _write_rows(tmp_path / "valid.txt", valid_qids, rng)
    with pytest.raises(SmoothrankError, match=r"valid\.txt:\d+: .*reappears"):
        load_letor(valid_path, cache=False)  # never grouped silently
    train = load_letor(train_path, cache=False)
    valid = load_letor(valid_path, regroup=True, cache=False)

    handed: list[np.ndarray] = []
    if library == "lightgbm":
        import lightgbm as lgb

        class SpyDataset(lgb.Dataset):
            def __init__(self, *args, **kwargs):
                handed.append(np.asarray(kwargs["group"]))
                super().__init__(*args, **kwargs)

        monkeypatch.setattr(lgb, "Dataset", SpyDataset)
    else:
        import xgboost as xgb

        class SpyDMatrix(xgb.DMatrix):
            def __init__(self, *args, **kwargs):
                if kwargs.get("qid") is not None:
                    qid = np.asarray(kwargs["qid"])
                    assert np.all(np.diff(qid) >= 0), "XGBoost needs rows sorted by qid"
                    handed.append(np.unique(qid, return_counts=True)[1])
                super().__init__(*args, **kwargs)

        monkeypatch.setattr(xgb, "DMatrix", SpyDMatrix)
    params = {"min_data_in_leaf": 3} if library == "lightgbm" else {}
    fitted = fit_gbdt(train, valid, library=library, objective=objective, num_boost_round=8,
                      early_stopping_rounds=None, eval_at=3, params=params)
    expected = [_query_sizes_from_text(train_path), _query_sizes_from_text(valid_path)]
    assert [h.tolist() for h in handed] == expected
    scores = fitted.predict(valid)
    ours = mean_metrics(evaluate_flat(scores, valid.labels, offsets=valid.offsets, metrics=["ndcg@3"],
                                      convention="lightgbm"))["ndcg@3"]
    assert fitted.history[-1]["valid_ndcg@3"] == pytest.approx(ours, abs=1e-9)


def test_gbdt_labels_beyond_the_gain_table_are_a_clear_error_or_get_their_gains(tmp_path):
    """PITFALLS 20: label gains default to 2^i - 1 for at most 31 levels (LightGBM 0..30, XGBoost's
    exponential gain 0..31). A larger label is refused before training with the file, line and
    split; with an explicit ``label_gain`` LightGBM grades it, and its own NDCG equals ours (2^y - 1)."""
    rng = np.random.default_rng(3)
    qids = [q for q in range(30) for _ in range(8)]
    path = _write_rows(tmp_path / "graded.txt", qids, rng, levels=tuple(np.linspace(-2.0, 2.0, 40)))
    data = load_letor(path, cache=False)
    assert data.labels.max() > 31
    file_labels = [int(line.split()[0]) for line in path.read_text().splitlines()]
    first = {top: next(i + 1 for i, label in enumerate(file_labels) if label > top) for top in (30, 31)}
    message = rf"graded\.txt:{first[30]}: label \d+ \(train split\): .*0\.\.30.*label_gain"
    with pytest.raises(SmoothrankError, match=message):
        fit_gbdt(data, None, library="lightgbm", objective="lambdarank", num_boost_round=2)
    small = load_letor(_write_rows(tmp_path / "small.txt", qids, rng), cache=False)
    message = rf"graded\.txt:{first[31]}: label \d+ \(valid split\): .*0\.\.31"
    with pytest.raises(SmoothrankError, match=message):
        fit_gbdt(small, data, library="xgboost", objective="rank:ndcg", num_boost_round=2)
    gains = [2.0**i - 1 for i in range(int(data.labels.max()) + 1)]
    fitted = fit_gbdt(data, data, library="lightgbm", objective="lambdarank", num_boost_round=5,
                      early_stopping_rounds=None, eval_at=5,
                      params={"label_gain": gains, "min_data_in_leaf": 3})
    ours = mean_metrics(evaluate_flat(fitted.predict(data), data.labels, offsets=data.offsets,
                                      metrics=["ndcg@5"], convention="lightgbm"))["ndcg@5"]
    assert fitted.history[-1]["valid_ndcg@5"] == pytest.approx(ours, abs=1e-9)


def test_grid_problems_of_the_item_itself_are_reported_once(letor_files, tmp_path):
    bad_objective = {"library": "xgboost", "objective": "rank:nope", "grid": {"max_depth": [2, 3, 4, 5]}}
    owned = {"name": "list_net", "overrides": {"training": {"num_threads": 2}},
             "grid": {"overrides.optimizer.lr": [0.1, 0.01, 0.001]}}
    with pytest.raises(ConfigError) as info:
        spec_from_dict(_spec_dict(letor_files, gbdt=[bad_objective], losses=[owned], baseline=None))
    message = str(info.value)
    assert message.count("gbdt.0.objective") == 1 and "gbdt.0 (" not in message
    assert "losses.0 (" not in message and "losses.0.overrides.training.num_threads" in message
    # A YAML date is a value no label can hold: refused by name, not a TypeError.
    path = tmp_path / "spec.yaml"
    path.write_text("name: t\ndatasets: [{name: mq2008, mq2008_folds: [1]}]\n"
                    "gbdt: [{library: lightgbm, objective: lambdarank, grid: {num_leaves: [2024-01-01]}}]\n")
    with pytest.raises(ConfigError, match=r"gbdt.0.grid.num_leaves: \[datetime.date\(2024, 1, 1\)\] cannot"):
        load_spec(path)


def test_the_documented_spec_example_is_valid():
    # docs/EXPERIMENTS.md's annotated spec, less its example file dataset (a.txt does not exist).
    text = (Path(__file__).resolve().parent.parent / "docs" / "EXPERIMENTS.md").read_text()
    block = text.split("## The spec (YAML)\n\n```yaml\n", 1)[1].split("```", 1)[0]
    data = yaml.safe_load(block)
    data["datasets"] = [d for d in data["datasets"] if "mq2008_folds" in d]
    spec = spec_from_dict(data, source="docs/EXPERIMENTS.md")
    assert "approx_ndcg-alpha10-lr0.01-mlp" in spec.method_labels()
    assert "lightgbm-list_mle-num_leaves31-min_data_in_leaf50" in spec.method_labels()
