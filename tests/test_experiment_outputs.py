"""Portable outputs of an experiment: every run's ``valid.pred`` / ``test.pred`` (LETOR prediction
files in the data file's line order), GBDT models in their library's own format that ``smoothrank
predict`` reads, and ``smoothrank evaluate`` over a whole output folder, several files or TREC runs
in one call, whose numbers are the summary's and those of the official LETOR 4.0 script (the
literal transcription of Eval-Score-4.0.pl in test_metrics_letor)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import two_method_spec, write_synthetic_folds
from test_metrics_letor import perl_like

from smoothrank.cli import main as cli_main
from smoothrank.data import load_letor, read_predictions, write_trec_run

pytest.importorskip("lightgbm")
xgboost = pytest.importorskip("xgboost")


@pytest.fixture(scope="module")
def experiment(tmp_path_factory) -> tuple[Path, Path]:
    root = write_synthetic_folds(tmp_path_factory.mktemp("letor"), seed=3, queries=(30, 12, 12), docs=8)
    spec = two_method_spec(root, seeds=[0], gbdt=[
        {"library": "lightgbm", "objective": "lambdarank", "num_boost_round": 6, "early_stopping_rounds": 3,
         "params": {"min_data_in_leaf": 3}},
        {"library": "xgboost", "objective": "rank:ndcg", "num_boost_round": 6, "early_stopping_rounds": 3}])
    spec["neural"]["training"]["epochs"] = 1
    spec_path = root / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(spec))
    out = root / "out"
    assert cli_main(["experiment", str(spec_path), "--out", str(out), "--quiet"]) == 0
    return root, out


def _runs(out: Path) -> dict[str, dict]:
    return {p.parent.name: json.loads(p.read_text()) for p in (out / "runs").glob("*/result.json")}


def test_every_run_writes_prediction_files_in_line_order(experiment):
    root, out = experiment
    runs = _runs(out)
    assert len(runs) == 3
    for run_id, result in runs.items():
        scores = np.load(out / "runs" / run_id / "scores.npz")
        for split, name in (("valid", "vali"), ("test", "test")):
            data = load_letor(root / f"{name}.txt")
            pred = read_predictions(out / "runs" / run_id / f"{split}.pred", expected=data.n_docs)
            # the data file is in query order: line order is row order here
            assert np.array_equal(pred[np.argsort(data.line_numbers)], scores[split]), (run_id, split)
            assert result["predictions"][split]["file"] == f"{split}.pred"


def _letor_script(data_path: Path, pred_path: Path) -> dict[str, float]:
    """Eval-Score-4.0.pl's means, 4 decimals as it prints them, from the files alone."""
    labels, qids = [], []
    for line in data_path.read_text().splitlines():
        fields = line.split("#")[0].split()
        labels.append(int(fields[0]))
        qids.append(fields[1])
    preds = [float(x) for x in pred_path.read_text().split()]
    per_query: dict[str, list[int]] = {}
    for i, q in enumerate(qids):
        per_query.setdefault(q, []).append(i)
    values = [perl_like([labels[i] for i in rows], [preds[i] for i in rows]) for rows in per_query.values()]
    return {m: round(float(np.mean([v[m] for v in values])), 4) for m in values[0]}


def test_the_letor_script_gives_the_summarys_numbers(experiment, capsys):
    root, out = experiment
    summary = json.loads((out / "summary.json").read_text())
    assert summary  # the summary was written
    for run_id, result in _runs(out).items():
        official = _letor_script(root / "test.txt", out / "runs" / run_id / "test.pred")
        shared = [m for m in result["metrics"]["test"] if m in official]
        assert {"ndcg@1", "ndcg@5", "ndcg@10", "map"} <= set(shared)
        for metric in shared:
            assert round(result["metrics"]["test"][metric], 4) == official[metric], (run_id, metric)


def test_evaluate_scores_a_whole_experiment_in_one_call(experiment, capsys):
    root, out = experiment
    capsys.readouterr()
    assert cli_main(["evaluate", "--predictions", str(out), "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    runs = _runs(out)
    assert sorted(r["predictions"] for r in doc["results"]) == sorted(runs)
    for row in doc["results"]:
        want = runs[row["predictions"]]["metrics"]["test"]
        assert set(want) <= set(row["metrics"])
        for metric, value in want.items():
            assert row["metrics"][metric] == pytest.approx(value, abs=1e-12), (row["predictions"], metric)
    # A table, one row per run, and plain files beside the folder (and a TREC run) in the same call.
    run_id = sorted(runs)[0]
    data = load_letor(root / "test.txt")
    pred = read_predictions(out / "runs" / run_id / "test.pred")
    trec = root / "run.trec"
    write_trec_run(trec, data, pred[np.argsort(data.line_numbers)])
    assert cli_main(["evaluate", "--data", str(root / "test.txt"), "--metrics", "ndcg@3,map", "--predictions",
                     str(out), str(out / "runs" / run_id / "test.pred"), str(trec)]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = [line.split("\t") for line in lines[2:]]
    assert len(rows) == len(runs) + 2
    by_label = {r[0].strip(): r[2:] for r in rows}
    assert by_label[run_id] == by_label[str(trec)] == by_label[str(out / "runs" / run_id / "test.pred")]


def test_a_trec_run_missing_a_document_is_refused_naming_it(experiment, capsys, tmp_path):
    root, _ = experiment
    data = load_letor(root / "test.txt")
    trec = tmp_path / "run.trec"
    write_trec_run(trec, data, np.arange(data.n_docs, dtype=float))
    lines = trec.read_text().splitlines()
    trec.write_text("\n".join(lines[1:]) + "\n")
    assert cli_main(["evaluate", "--data", str(root / "test.txt"), "--predictions", str(trec)]) != 0
    err = capsys.readouterr().err
    assert "no line for qid" in err and str(trec) in err


@pytest.mark.parametrize(("library", "name"), [("lightgbm", "model.txt"), ("xgboost", "model.json")])
def test_gbdt_models_are_saved_natively_and_predict_scores_new_data(experiment, library, name, tmp_path):
    root, out = experiment
    run_dir = next(out / "runs" / r for r in _runs(out) if library in r)
    model = run_dir / name
    assert model.is_file()
    got = tmp_path / "test.pred"
    assert cli_main(["predict", str(model), str(root / "test.txt"), "--out", str(got)]) == 0
    assert np.allclose(read_predictions(got), read_predictions(run_dir / "test.pred"), rtol=1e-6, atol=1e-6)
    # The library alone reads it too.
    data = load_letor(root / "test.txt")
    if library == "lightgbm":
        import lightgbm

        direct = lightgbm.Booster(model_file=str(model)).predict(data.features)
    else:
        direct = xgboost.Booster(model_file=str(model)).predict(xgboost.DMatrix(data.features))
    assert np.allclose(direct, np.load(run_dir / "scores.npz")["test"], rtol=1e-6, atol=1e-6)
