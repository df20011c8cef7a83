"""Bad configs, specs and arguments of train / experiment / compare: a clear error naming the file
and the key (or the argument), exit status 2, and nothing written before the input is validated."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from conftest import assert_spec_problems, two_method_spec, write_synthetic_folds

from smoothrank.cli import main
from smoothrank.errors import SmoothrankError
from smoothrank.experiments import run_experiment, spec_from_dict
from smoothrank.experiments.runner import write_json


@pytest.fixture(scope="module")
def folds(tmp_path_factory) -> Path:
    return write_synthetic_folds(tmp_path_factory.mktemp("folds"), seed=0, queries=(12, 6, 6), docs=5)


def _config(tmp_path: Path, folds: Path, **extra) -> Path:
    config = {"seed": 0, "data": {"train": str(folds / "train.txt"), "valid": str(folds / "vali.txt")},
              "model": {"kind": "mlp", "hidden": [4]},
              "training": {"epochs": 1, "batch_size": 4, "list_size": 5, "num_threads": 1},
              "evaluation": {"metrics": ["ndcg@5", "ndcg@10"]}, "output": {"run_dir": str(tmp_path / "run")},
              **extra}
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _spec(tmp_path: Path, folds: Path, name: str = "spec.yaml", **extra) -> Path:
    data = two_method_spec(folds, **{"seeds": [0], **extra})
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def _refused(argv: list[str], capsys, *fragments: str) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("smoothrank: error: ") and "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in err, (fragment, err)
    return err


# ------------------------------------------------------------------------------ train
@pytest.mark.parametrize("override", ["loss.options.temperature=0", "loss.options.temperature=-1",
                                      "loss.options.temperature=abc", "loss.options.k=0",
                                      "loss.options.k=2.5"])
def test_train_checks_loss_option_values_before_writing(folds, tmp_path, capsys, override):
    config = _config(tmp_path, folds)
    option = override.removeprefix("loss.options.").split("=")[0]
    _refused(["train", str(config), override], capsys, "cfg.yaml", f"loss.options: {option}:")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(("overrides", "key"), [
    (["schedule.name=softrank", "schedule.metric=foo"], "schedule.metric: unknown metric 'foo'"),
    (["evaluation.metrics=[foo]", "evaluation.select_by=foo"], "evaluation.metrics.0: unknown metric 'foo'"),
    (["evaluation.metrics=[ndcg@0,ndcg@10]"], "evaluation.metrics.0: the cutoff of 'ndcg@0'"),
])
def test_train_checks_metric_names_before_writing(folds, tmp_path, capsys, overrides, key):
    err = _refused(["train", str(_config(tmp_path, folds)), *overrides], capsys, "cfg.yaml", key)
    assert "metrics:" not in err.replace("evaluation.metrics", "")  # not blamed on another key
    assert not (tmp_path / "run").exists()


def test_a_metric_that_cannot_be_computed_fails_before_anything_is_written(folds, tmp_path, capsys,
                                                                           monkeypatch):
    # As huge cutoffs once did inside torch: whatever a metric raises comes out before any file.
    import smoothrank.metrics

    huge = "ndcg@99999999999999999999"
    real = smoothrank.metrics.evaluate

    def overflowing(*args, metrics=(), **kwargs):
        if huge in metrics:
            raise OverflowError("Python int too large to convert to C long")
        return real(*args, metrics=metrics, **kwargs)

    monkeypatch.setattr(smoothrank.metrics, "evaluate", overflowing)
    config = _config(tmp_path, folds)
    _refused(["train", str(config), f"evaluation.metrics=[{huge}]", f"evaluation.select_by={huge}"], capsys,
             "cfg.yaml", "evaluation.metrics.0:", "too large")
    assert not (tmp_path / "run").exists()
    spec = _spec(tmp_path, folds, metrics=[huge], select_by=huge)
    _refused(["experiment", str(spec), "--out", str(tmp_path / "out")], capsys, "spec.yaml", "metrics.0:")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("override", "key"), [
    ("seed=99999999999999999999", "seed: expected an integer from 0 to 2**32 - 1"),
    ("seed=-1", "seed: expected an integer from 0 to 2**32 - 1"),
    ("training.epochs=true", "training.epochs: expected a number, not a boolean"),
    ("optimizer.lr=true", "optimizer.lr: expected a number, not a boolean"),
    ("model.hidden=[true]", "model.hidden.0: expected a number, not a boolean"),
    ("optimizer.lr=.inf", "optimizer.lr: Input should be a finite number"),
    ("output.run_dir=''", "output.run_dir: expected a directory path"),
])
def test_train_refuses_out_of_range_seeds_booleans_and_infinite_rates(folds, tmp_path, capsys, override, key):
    _refused(["train", str(_config(tmp_path, folds)), override], capsys, "cfg.yaml", key)
    assert not (tmp_path / "run").exists()


def test_the_largest_seed_trains(folds, tmp_path, capsys):
    run_dir = tmp_path / "big-seed"
    assert main(["train", str(_config(tmp_path, folds)), f"seed={2**32 - 1}", "--quiet", "--run-dir",
                 str(run_dir)]) == 0
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["seed"] == 2**32 - 1


def test_seeds_beyond_32_bits_are_refused_since_torch_would_repeat_smaller_ones(folds, tmp_path, capsys):
    # Why the range stops at 2**32 - 1: torch's CPU generator keeps the low 32 bits of a seed.
    torch.manual_seed(2**32 + 5)
    wrapped = torch.randn(4)
    torch.manual_seed(5)
    assert torch.equal(wrapped, torch.randn(4))
    _refused(["train", str(_config(tmp_path, folds)), f"seed={2**32 + 5}"], capsys, "cfg.yaml",
             "seed: expected an integer from 0 to 2**32 - 1")
    assert not (tmp_path / "run").exists()


def test_train_overrides_may_follow_options(folds, tmp_path, capsys):
    run_dir = tmp_path / "x"
    assert main(["train", str(_config(tmp_path, folds)), "--run-dir", str(run_dir), "training.epochs=2",
                 "--quiet", "optimizer.lr=0.5"]) == 0
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert saved["training"]["epochs"] == 2 and saved["optimizer"]["lr"] == 0.5
    with pytest.raises(SystemExit):  # an unknown option is still an argparse error
        main(["train", str(_config(tmp_path, folds)), "--bogus", "training.epochs=2"])
    assert "unrecognized arguments: --bogus" in capsys.readouterr().err


def test_empty_output_paths_are_refused(folds, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config, spec = _config(tmp_path, folds), _spec(tmp_path, folds)
    before = sorted(p.name for p in tmp_path.iterdir())
    _refused(["train", str(config), "--run-dir", ""], capsys, "--run-dir")
    _refused(["experiment", str(spec), "--out", ""], capsys, "--out")
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_files_that_are_not_utf8_are_named(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"seed: 1\n# \xff\n")
    _refused(["train", str(bad)], capsys, "bad.yaml: not UTF-8")
    _refused(["experiment", str(bad), "--dry-run"], capsys, "bad.yaml: not UTF-8")


# ------------------------------------------------------------------------------ experiment specs
def test_spec_refuses_repeated_metrics_run_folder_separators_and_bad_model_shapes(folds):
    # Found by a review on 2026-11-24: each passed the check and failed (or misled) at run time.
    assert_spec_problems(two_method_spec(folds, metrics=["ndcg@1", "ndcg@1"], select_by="ndcg@1"),
                         ["metrics: ['ndcg@1'] listed twice"])
    # Names are read as evaluate keys them, so that the runner finds its results under them.
    assert_spec_problems(two_method_spec(folds, metrics=["NDCG@1", "ndcg@1 "], select_by="ndcg@1"),
                         ["metrics: ['ndcg@1'] listed twice"])
    from smoothrank.experiments import spec_from_dict

    read = spec_from_dict(two_method_spec(folds, metrics=["NDCG@1", "MAP"], select_by="NDCG@1"))
    assert read.metrics == ["ndcg@1", "map"] and read.select_by == "ndcg@1"
    spec = two_method_spec(folds)
    spec["datasets"][0]["name"] = "a--fold1--x"
    assert_spec_problems(spec, ["datasets.0.name: 'a--fold1--x' holds '--'"])
    spec = two_method_spec(folds)
    spec["gbdt"][0]["label"] = "x--fold1--y"
    assert_spec_problems(spec, ["method label 'x--fold1--y' holds '--'"])
    spec = two_method_spec(folds)
    spec["models"] = [{"label": "car", "kind": "context_aware", "input_dim": 10, "n_heads": 3, "n_blocks": 1,
                       "hidden": 8}]
    assert_spec_problems(spec, ["input_dim (10) must be divisible by n_heads (3)"])
    spec = two_method_spec(folds)
    spec["gbdt"] = [{"library": "lightgbm", "objective": "list_mle", "hessian": "curvature",
                     "min_hessian": True}]
    assert_spec_problems(spec, ["gbdt.0.min_hessian"])  # a boolean is not a number


def test_spec_seeds_must_be_distinct_in_range_and_given(folds):
    assert_spec_problems(two_method_spec(folds, seeds=[]), ["seeds: at least one seed is required"])
    assert_spec_problems(two_method_spec(folds, seeds=[0, 0]), ["seeds: [0] listed twice"])
    assert_spec_problems(two_method_spec(folds, seeds=[2**32]), ["seeds.0: expected an integer from 0"])
    assert_spec_problems(two_method_spec(folds, seeds=[True]), ["seeds.0: expected an integer, not a bool"])
    xgb = [{"library": "xgboost", "objective": "rank:ndcg", "num_boost_round": 3}]
    # Seeds a booster would fold onto smaller ones (checked with the libraries in test_experiments.py).
    assert_spec_problems(two_method_spec(folds, seeds=[0, 2**32], gbdt=xgb),
                         ["seeds.1: expected an integer from 0 to 2**32 - 1"])  # as torch (above)
    spec_from_dict(two_method_spec(folds, seeds=[0, 2**32 - 1], gbdt=xgb))
    assert_spec_problems(two_method_spec(folds, seeds=[2**31]), ["seeds: lightgbm keeps seeds 0..2147483647"])
    spec_from_dict(two_method_spec(folds, seeds=[2**31 - 1]))
    spec_from_dict(two_method_spec(folds, seeds=[2**32 - 1], gbdt=[]))  # torch keeps it apart


def test_spec_loss_option_values_are_checked_in_dry_run(folds, tmp_path, capsys):
    bad_loss = [{"name": "neural_ndcg", "options": {"temperature": 0}}]
    assert_spec_problems(two_method_spec(folds, losses=bad_loss), ["losses.0.options: temperature"])
    blend = {"label": "stack", "members": ["neural_ndcg-linear", "lightgbm-lambdarank"], "weights": "learned",
             "learner": {"loss": "neural_ndcg", "options": {"k": 2.5}}}
    assert_spec_problems(two_method_spec(folds, blends=[blend]), ["blends.0.learner.options: k"])
    # The spec-only form of an option is resolved before the loss checks its values.
    shallow = [{"name": "approx_ndcg", "options": {"discount": {"shallow": 0.0, "n": 10}}}]
    spec_from_dict(two_method_spec(folds, losses=shallow))
    spec = _spec(tmp_path, folds, losses=bad_loss)
    _refused(["experiment", str(spec), "--dry-run"], capsys, "spec.yaml", "losses.0.options: temperature")
    _refused(["experiment", str(spec), "--out", str(tmp_path / "out")], capsys, "losses.0.options")
    assert not (tmp_path / "out").exists()


def test_spec_refuses_run_settings_its_own_keys_set(folds):
    neural = {"training": {"epochs": 1, "num_threads": 4},
              "evaluation": {"metrics": ["map"], "select_by": "map"}}
    assert_spec_problems(two_method_spec(folds, neural=neural), [
        "neural.evaluation.metrics: every run uses the spec's top-level metrics",
        "neural.evaluation.select_by: every run uses the spec's top-level select_by",
        "neural.training.num_threads: every run uses the spec's top-level num_threads"])
    loss = {"name": "neural_ndcg", "overrides": {"evaluation": {"convention": "trec"}}}
    assert_spec_problems(two_method_spec(folds, losses=[loss]), ["losses.0.overrides.evaluation.convention"])


@pytest.mark.parametrize(("gbdt", "fragment"), [
    ({"library": "lightgbm", "objective": "lambdarank", "params": {"learning_rate": -1}}, "learning_rate"),
    ({"library": "lightgbm", "objective": "lambdarank", "params": {"num_leaves": "x"}}, "num_leaves"),
    ({"library": "xgboost", "objective": "rank:ndcg", "params": {"eta": "x"}}, "learning_rate"),
    ({"library": "xgboost", "objective": "rank:ndcg", "params": {"max_depth": -2}}, "max_depth"),
    # LightGBM grows one-leaf trees for any custom objective with it (a review; its lambdarank splits)
    ({"library": "lightgbm", "objective": "list_net", "params": {"bagging_by_query": True}},
     "one-leaf trees"),
])
def test_gbdt_params_the_library_refuses_fail_in_dry_run(folds, tmp_path, capsys, gbdt, fragment):
    spec = _spec(tmp_path, folds, losses=[], models=[], gbdt=[gbdt])
    err = _refused(["experiment", str(spec), "--dry-run"], capsys, "spec.yaml", "gbdt.0.params:", fragment)
    assert "[LightGBM]" not in err


@pytest.mark.parametrize(("library", "objective"), [("lightgbm", "lambdarank"), ("xgboost", "neural_ndcg")])
def test_a_missing_gbdt_library_refuses_the_spec_before_any_run(folds, tmp_path, capsys, monkeypatch,
                                                                  library, objective):
    # Before, the neural runs trained and every GBDT run then failed; the dry run listed them "to run".
    monkeypatch.setitem(__import__("sys").modules, library, None)  # import raises ImportError
    spec = _spec(tmp_path, folds, gbdt=[{"library": library, "objective": objective}])
    for extra in (["--dry-run"], ["--quiet"]):
        _refused(["experiment", str(spec), "--out", str(tmp_path / "out"), *extra], capsys, "spec.yaml",
                 "gbdt.0.library:", "smoothrank[gbdt]")
    assert not (tmp_path / "out").exists()


def test_gbdt_library_errors_in_training_are_failed_runs(folds, tmp_path):
    # Data-dependent parameters (a constraint per feature) are only checked by the library in training.
    gbdt = [{"library": "lightgbm", "objective": "lambdarank", "num_boost_round": 3,
             "params": {"min_data_in_leaf": 3, "monotone_constraints": [1] * 9}}]
    spec = spec_from_dict(two_method_spec(folds, seeds=[0], losses=[], models=[], gbdt=gbdt))
    outcome = run_experiment(spec, tmp_path / "out")
    (message,) = outcome.failed.values()
    assert list(outcome.failed) == ["syn--files--lightgbm-lambdarank--seed0"]
    assert message.startswith("lightgbm lambdarank: ") and "monotone_constraints" in message


def test_a_refused_rerun_leaves_spec_yaml_alone(folds, tmp_path, capsys):
    gbdt_only = {"losses": [], "models": [],
                 "gbdt": [{"library": "lightgbm", "objective": "lambdarank", "num_boost_round": 3,
                           "params": {"min_data_in_leaf": 3}}]}
    out = tmp_path / "out"
    assert main(["experiment", str(_spec(tmp_path, folds, **gbdt_only)), "--out", str(out), "--quiet"]) == 0
    kept = (out / "spec.yaml").read_text()
    gbdt_only["gbdt"][0]["num_boost_round"] = 4
    changed = _spec(tmp_path, folds, name="changed.yaml", **gbdt_only)
    _refused(["experiment", str(changed), "--out", str(out), "--quiet"], capsys, "other settings")
    assert (out / "spec.yaml").read_text() == kept


# ------------------------------------------------------------------------------ compare
def _result(method: str, values: list[float], *, qid0: int = 0, metric: str = "ndcg@1") -> dict:
    return {"dataset": "syn", "method": method, "fold": None, "seed": 0, "kind": "neural",
            "metrics": {"test": {metric: float(np.mean(values))}},
            "per_query": {"qids": [str(qid0 + i) for i in range(len(values))], metric: values}}


@pytest.fixture()
def two_methods(tmp_path) -> Path:
    out = tmp_path / "exp"
    rng = np.random.default_rng(0)
    for method in ("a", "b"):
        write_json(out / "runs" / method / "result.json", _result(method, rng.uniform(size=12).tolist()))
    return out


_VALID = {"dataset": "syn", "method": "b", "fold": None, "kind": "neural"}


@pytest.mark.parametrize("content", [
    "{not json", "[]", '{"method": "a"}',
    # valid JSON, damaged values (a review found these reached float() deep inside the summaries)
    json.dumps({**_VALID, "metrics": {"test": {"ndcg@1": "abc"}}}),
    json.dumps({**_VALID, "metrics": {"test": {"ndcg@1": 0.5}}, "per_query": {"qids": ["0", "1"],
                                                                              "ndcg@1": ["abc", 0.1]}}),
    json.dumps({**_VALID, "metrics": {"test": {"ndcg@1": 0.5}}, "per_query": {"qids": ["0", "1"],
                                                                              "ndcg@1": [0.5]}}),
    json.dumps({**_VALID, "metrics": {"test": {"ndcg@1": True}}}),
    # a method, dataset or fold of the wrong type gave a TypeError traceback from sorted()
    json.dumps({**_VALID, "method": 5, "metrics": {"test": {"ndcg@1": 0.5}}}),
    json.dumps({**_VALID, "dataset": None, "metrics": {"test": {"ndcg@1": 0.5}}}),
    json.dumps({**_VALID, "fold": "1", "metrics": {"test": {"ndcg@1": 0.5}}}),
    # a list as a query id was a TypeError traceback (unhashable); an infinite value leaked numpy
    # warnings and printed +inf as a mean difference
    json.dumps({**_VALID, "metrics": {"test": {"ndcg@1": 0.5}}, "per_query": {"qids": [["0"], "1"],
                                                                              "ndcg@1": [0.5, 0.1]}}),
    json.dumps({**_VALID, "metrics": {"test": {"ndcg@1": 0.5}},
                "per_query": {"qids": ["0", "1"], "ndcg@1": [float("inf"), 0.1]}}),
    json.dumps({**_VALID, "metrics": {"test": {"ndcg@1": float("-inf")}}}),
    json.dumps({**_VALID, "metrics": {"test": {"ndcg@1": 10 ** 400}}}),  # was an OverflowError traceback
])
def test_compare_names_a_damaged_result_file(two_methods, capsys, content):
    path = two_methods / "runs" / "b" / "result.json"
    path.write_text(content)
    _refused(["compare", str(two_methods), "a", "b"], capsys, str(path), "delete it to redo the run")


def test_compare_defaults_to_the_stored_metrics_and_refuses_others(two_methods, capsys):
    assert main(["compare", str(two_methods), "a", "b"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ndcg")]
    assert [row.split("|")[1].strip() for row in rows] == ["ndcg@1"]
    for metrics in ("foo", "ndcg@7", "", "ndcg@1,map"):
        _refused(["compare", str(two_methods), "a", "b", "--metrics", metrics], capsys, "--metrics",
                 "stored ndcg@1")


def test_compare_json_is_strict_and_the_table_shows_no_nan(tmp_path, capsys):
    out = tmp_path / "exp"
    write_json(out / "runs" / "a" / "result.json", _result("a", [0.5]))  # one pair: no t-test
    write_json(out / "runs" / "b" / "result.json", _result("b", [0.25]))
    assert main(["compare", str(out), "a", "b", "--format", "json"]) == 0
    printed = json.loads(capsys.readouterr().out, parse_constant=lambda token: pytest.fail(token))
    assert printed["ndcg@1"]["p_value"] is None and printed["ndcg@1"]["n_queries"] == 1
    assert printed["ndcg@1"]["interval"] == [None, None]
    assert main(["compare", str(out), "a", "b"]) == 0
    assert "nan" not in capsys.readouterr().out.lower()


def test_compare_refuses_methods_without_common_test_queries(two_methods, tmp_path, capsys):
    other = tmp_path / "other"  # the same dataset name, another test file (other query ids)
    write_json(other / "runs" / "b" / "result.json", _result("b", [0.1, 0.4, 0.3], qid0=900))
    _refused(["compare", str(two_methods), "a", "b", "--b-out", str(other)], capsys, "no common test queries")


def test_compare_refuses_test_queries_that_only_partly_meet(two_methods, tmp_path, capsys):
    # An audit (2026-11-25): another experiment's test file under the same dataset name shared 3 query
    # ids with this one's; compare paired those 3 and called the difference significant.
    other = tmp_path / "partial"
    write_json(other / "runs" / "b" / "result.json", _result("b", [0.1, 0.4, 0.3, 0.9, 0.2], qid0=9))
    _refused(["compare", str(two_methods), "a", "b", "--b-out", str(other)], capsys,
             "were not tested on the same queries",
             "3 are common, 9 only in the runs of a and 2 only in those of b")


def test_compare_names_pooled_datasets_and_tests_one_on_request(tmp_path, capsys):
    # An audit (2026-11-25): two datasets of one experiment were pooled into one t-test without a word,
    # while the summary tests each on its own.
    from scipy.stats import ttest_rel

    out = tmp_path / "exp"
    rng = np.random.default_rng(1)
    values = {(m, d): rng.uniform(size=8).tolist() for m in "ab" for d in ("one", "two")}
    for (method, dataset), vals in values.items():
        write_json(out / "runs" / f"{method}-{dataset}" / "result.json",
                   {**_result(method, vals), "dataset": dataset})
    assert main(["compare", str(out), "a", "b"]) == 0
    assert "datasets one, two pooled" in capsys.readouterr().out
    assert main(["compare", str(out), "a", "b", "--dataset", "two", "--format", "json"]) == 0
    test = json.loads(capsys.readouterr().out)["ndcg@1"]
    assert test["datasets"] == ["two"] and test["n_queries"] == 8
    assert test["p_value"] == pytest.approx(ttest_rel(values[("a", "two")], values[("b", "two")]).pvalue)
    _refused(["compare", str(out), "a", "b", "--dataset", "three"], capsys,
             "--dataset: a has no run on 'three'; it has ['one', 'two']")
    # (a review) b has runs, but not on the dataset named: said so, not "no finished run of 'b'"
    def put(folder: Path, method: str, dataset: str, **extra) -> None:
        write_json(folder / "runs" / f"{method}-{dataset}" / "result.json",
                   {**_result(method, values[(method, dataset)]), "dataset": dataset, **extra})

    lone = tmp_path / "lone"
    for method, dataset in (("a", "one"), ("a", "two"), ("b", "two")):
        put(lone, method, dataset)
    _refused(["compare", str(lone), "a", "b", "--dataset", "one"], capsys, "--dataset: b has no run on 'one'")
    # --b-out with another experiment holding only the dataset named: tested on it
    other = tmp_path / "other"
    put(other, "b", "two")
    assert main(["compare", str(out), "a", "b", "--b-out", str(other), "--dataset", "two", "--format",
                 "json"]) == 0
    assert json.loads(capsys.readouterr().out)["ndcg@1"]["p_value"] == pytest.approx(test["p_value"])
    # a dataset where both ran, but on no common fold, is not named as pooled
    put(lone, "b", "one", fold=2)
    assert main(["compare", str(lone), "a", "b"]) == 0
    assert "pooled" not in capsys.readouterr().out.splitlines()[0]


def test_compare_interval_is_finite_at_a_tiny_alpha(two_methods, capsys):
    # 1 - alpha/2 rounded to 1 and gave [-inf, +inf]; the upper tail's quantile has no such rounding.
    intervals = []
    for alpha in ("0.05", "1e-17"):
        assert main(["compare", str(two_methods), "a", "b", "--alpha", alpha, "--format", "json"]) == 0
        row = json.loads(capsys.readouterr().out)["ndcg@1"]
        intervals.append(row["interval"])
        low, high = row["interval"]
        assert low is not None and high is not None and math.isfinite(low) and math.isfinite(high)
        assert (low + high) / 2 == pytest.approx(row["mean_difference"], abs=1e-12)
    (low5, high5), (low17, high17) = intervals
    assert high17 - low17 > 3 * (high5 - low5)  # t quantile 1e-17 / 2 at 11 df against 0.025


def test_compare_names_a_folder_in_place_of_the_plan_file(two_methods, capsys):
    (two_methods / "plan.json").mkdir()  # was skipped silently, and every run in the folder read
    _refused(["compare", str(two_methods), "a", "b"], capsys, "plan.json: damaged", "--all-runs")


@pytest.mark.parametrize("alpha", ["2", "0", "-1", "nan", "1"])
def test_compare_alpha_must_be_a_level(two_methods, capsys, alpha):
    _refused(["compare", str(two_methods), "a", "b", f"--alpha={alpha}"], capsys, "--alpha")


def test_compare_methods_default_metrics_are_the_stored_ones(two_methods):
    from smoothrank.experiments import load_results
    from smoothrank.experiments.report import compare_methods

    results = load_results(two_methods)
    assert list(compare_methods(results, "a", "b")) == ["ndcg@1"]
    with pytest.raises(SmoothrankError, match="'map' not stored"):
        compare_methods(results, "a", "b", metrics=["map"])
    assert all(math.isfinite(t.pvalue) for t in compare_methods(results, "a", "b").values())
