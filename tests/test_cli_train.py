"""End-to-end CLI: train, kill and resume, predict (line order), evaluate, losses; bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from conftest import folder_held_by_another_process, write_fold1_slices

from smoothrank.cli import main

REPO = Path(__file__).resolve().parent.parent



@pytest.fixture(scope="module")
def letor(tmp_path_factory, shared_dir) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("cli-letor")
    return write_fold1_slices(shared_dir, folder, train=(10, 30), valid=15, test=15)


def write_config(path: Path, letor: dict[str, Path], run_dir: Path, **extra) -> Path:
    config = {
        "seed": 1,
        "data": {k: str(v) for k, v in letor.items()},
        "transforms": [],
        "model": {"kind": "mlp", "hidden": [8]},
        "loss": {"name": "neural_ndcg"},
        "optimizer": {"lr": 0.01},
        "training": {"epochs": 4, "batch_size": 8, "list_size": 16, "num_threads": 1},
        "evaluation": {"metrics": ["ndcg@5", "ndcg@10", "map"]},
        "output": {"run_dir": str(run_dir)},
        **extra,
    }
    path.write_text(yaml.safe_dump(config))
    return path


def _history(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if k != "seconds"} for row in rows]


def test_train_kill_resume_predict_evaluate(letor, tmp_path, capsys):
    config = write_config(tmp_path / "c.yaml", letor, tmp_path / "unused")
    full = tmp_path / "full"
    assert main(["train", str(config), "--quiet", "--run-dir", str(full)]) == 0

    # A real SIGKILL in the middle of writing epoch 3's checkpoint (half of the bytes written).
    killed = tmp_path / "killed"
    script = textwrap.dedent(f"""
        import os, signal, sys
        import smoothrank.training._io as io
        original, calls = io.atomic_write_bytes, []
        def dying(path, data):
            if str(path).endswith("checkpoint.pt"):
                calls.append(path)
                if len(calls) == 3:
                    stale = os.path.join(os.path.dirname(path), ".checkpoint.pt.0123456789abcdef.tmp")
                    with open(stale, "wb") as f:  # the atomic writer's own naming
                        f.write(data[: len(data) // 2])
                    os.kill(os.getpid(), signal.SIGKILL)
            original(path, data)
        io.atomic_write_bytes = dying
        from smoothrank.cli import main
        sys.exit(main(["train", {str(config)!r}, "--quiet", "--run-dir", {str(killed)!r}]))
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    assert proc.returncode == -9, proc.stderr
    assert not (killed / "model.pt").exists()
    assert torch.load(killed / "checkpoint.pt", weights_only=True)["epoch"] == 2
    assert main(["train", str(config), "--quiet", "--run-dir", str(killed), "--resume"]) == 0
    assert _history(killed) == _history(full)
    a = torch.load(full / "model.pt", weights_only=True)["state_dict"]
    b = torch.load(killed / "model.pt", weights_only=True)["state_dict"]
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    summaries = [json.loads((run / "summary.json").read_text()) for run in (killed, full)]
    assert summaries[0] == summaries[1]
    assert not [p.name for p in killed.iterdir() if p.name.endswith(".tmp")]  # stale temp files removed

    # predict: one score per input line, in line order; checked against the model applied by hand.
    out = tmp_path / "pred.txt"
    assert main(["predict", str(full / "model.pt"), str(letor["test"]), "--out", str(out)]) == 0
    predicted = np.loadtxt(out)
    lines = letor["test"].read_text().splitlines()
    assert predicted.shape == (len(lines),)
    features = np.zeros((len(lines), 46), dtype=np.float32)
    for i, line in enumerate(lines):
        for token in line.split("#")[0].split()[2:]:
            index, value = token.split(":")
            features[i, int(index) - 1] = float(value)
    from smoothrank.training.artifact import load_model

    loaded = load_model(full / "model.pt")
    assert loaded.transform_state is None
    with torch.no_grad():
        by_hand = loaded.model(torch.from_numpy(features)[None]).double().numpy()[0]
    np.testing.assert_allclose(predicted, by_hand, rtol=1e-4, atol=1e-4)

    # TREC run output.
    run_file = tmp_path / "run.trec"
    assert main(["predict", str(full / "model.pt"), str(letor["test"]), "--out", str(run_file),
                 "--format", "trec"]) == 0
    assert len(run_file.read_text().splitlines()) == len(lines)

    # evaluate reads the prediction file and agrees with the training summary.
    capsys.readouterr()
    status = main(["evaluate", "--data", str(letor["test"]), "--predictions", str(out),
                   "--metrics", "ndcg@5,ndcg@10,map", "--convention", "letor4", "--format", "json"])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    reported = json.loads(captured.out)["metrics"]
    assert reported == pytest.approx(summaries[1]["test"], abs=1e-6)


def test_overrides_and_losses_listing(letor, tmp_path, capsys):
    config = write_config(tmp_path / "c.yaml", letor, tmp_path / "run")
    overrides = ["training.epochs=2", "model={kind: linear}", "loss.name=list_net"]
    assert main(["train", str(config), *overrides]) == 0
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert saved["training"]["epochs"] == 2 and saved["model"] == {"kind": "linear"}
    out = capsys.readouterr().out
    assert "letor4 convention" in out and "model:" in out
    assert main(["losses"]) == 0
    listing = capsys.readouterr().out
    for name in ("neural_ndcg", "lambda_rank", "list_net", "approx_ndcg"):
        assert f"{name}:" in listing


@pytest.mark.parametrize("problem, expected", [
    ({"optimizer": {"lr": "fast", "nesterov": True}}, ["optimizer.lr", "optimizer.nesterov: unknown key"]),
    ({"training": {"epochs": 0}, "modle": {}}, ["training.epochs", "modle: unknown key"]),
    ({"data": {"train": "/nonexistent/train.txt"}}, ["/nonexistent/train.txt"]),
    ({"loss": {"name": "neural_ndcg", "options": {"temprature": 1}}}, ["temprature"]),
])
def test_bad_config_clear_error_and_nothing_written(letor, tmp_path, capsys, problem, expected):
    config = yaml.safe_load(write_config(tmp_path / "c.yaml", letor, tmp_path / "run").read_text())
    for key, value in problem.items():
        config[key] = {**config.get(key, {}), **value}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config))
    assert main(["train", str(tmp_path / "c.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("smoothrank: error: ") and "Traceback" not in err
    for text in expected:
        assert text in err, err
    assert not (tmp_path / "run").exists()


def test_missing_files_and_feature_mismatch(letor, tmp_path, capsys):
    assert main(["train", str(tmp_path / "missing.yaml")]) == 2
    assert "missing.yaml" in capsys.readouterr().err
    config = write_config(tmp_path / "c.yaml", letor, tmp_path / "run", transforms=["standardize"])
    assert main(["train", str(config), "training.epochs=1", "--quiet"]) == 0
    model = tmp_path / "run" / "model.pt"
    # Data with 50 features for a 46-feature model.
    wide = tmp_path / "wide.txt"
    wide.write_text("".join(line.split("#")[0].rstrip() + " 50:1.0\n"
                            for line in letor["test"].read_text().splitlines()))
    out = tmp_path / "pred.txt"
    assert main(["predict", str(model), str(wide), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "50 features" in err and "46" in err and not out.exists()
    assert main(["predict", str(tmp_path / "nope.pt"), str(letor["test"]), "--out", str(out)]) == 2
    assert "nope.pt" in capsys.readouterr().err
    junk = tmp_path / "junk.pt"
    junk.write_text("not a model")
    assert main(["predict", str(junk), str(letor["test"]), "--out", str(out)]) == 2
    assert "not a smoothrank model" in capsys.readouterr().err
    assert main(["predict", str(model), str(tmp_path / "nodata.txt"), "--out", str(out)]) == 2
    assert "nodata.txt" in capsys.readouterr().err
    assert not out.exists()


def test_predict_reads_files_with_the_training_files_index_base(tmp_path, capsys):
    # A model trained on a zero-based file (sklearn's dump_svmlight_file writes index 0) scores a
    # zero-based file that has no "0:" token with the columns it was trained on, not one to the left.
    from sklearn.datasets import dump_svmlight_file

    from smoothrank.data import load_letor
    from smoothrank.training import load_model

    rng = np.random.default_rng(0)
    features = rng.uniform(size=(40, 4)).round(3)
    labels = rng.integers(0, 3, size=40)
    qids = np.repeat(np.arange(8), 5)
    dump_svmlight_file(features, labels, str(tmp_path / "train.txt"), query_id=qids, zero_based=True)
    sparse = features.copy()
    sparse[:, 0] = 0.0  # no "0:" token anywhere: alone, the file reads as one-based
    dump_svmlight_file(sparse, labels, str(tmp_path / "test.txt"), query_id=qids, zero_based=True)
    assert "0:" not in (tmp_path / "test.txt").read_text()
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"data": {"train": str(tmp_path / "train.txt")},
                                      "model": {"kind": "linear"},
                                      "training": {"epochs": 1, "list_size": 8, "num_threads": 1},
                                      "output": {"run_dir": str(tmp_path / "run")}}))
    assert main(["train", str(config), "--quiet"]) == 0
    model = load_model(tmp_path / "run" / "model.pt")
    assert model.index_base == 0
    assert main(["predict", str(tmp_path / "run" / "model.pt"), str(tmp_path / "test.txt"), "--out",
                 str(tmp_path / "p.txt")]) == 0
    expected = model.score(load_letor(tmp_path / "test.txt", zero_based=True, n_features=4))
    np.testing.assert_allclose(np.loadtxt(tmp_path / "p.txt"), expected, rtol=1e-6)
    # A one-based file of the same 4 features under this zero-based model: its index 4 is a fifth
    # column, so it is refused by its width (nothing written), never scored shifted.
    (tmp_path / "bad.txt").write_text("1 qid:1 1:0.5 4:0.1\n")
    capsys.readouterr()
    assert main(["predict", str(tmp_path / "run" / "model.pt"), str(tmp_path / "bad.txt"), "--out",
                 str(tmp_path / "q.txt")]) != 0
    assert "has 5 features but the model" in capsys.readouterr().err and not (tmp_path / "q.txt").exists()


def test_evaluate_and_predict_regroup_a_file_whose_queries_are_apart(letor, tmp_path, capsys):
    # The reader's advice for such a file was "pass regroup=True", an option neither command had.
    lines = ["2 qid:1 1:0.9 2:0.1", "0 qid:2 1:0.2 2:0.5", "0 qid:1 1:0.1 2:0.3", "1 qid:2 1:0.8 2:0.4",
             "1 qid:1 1:0.5 2:0.2"]
    scores = [0.3, 0.9, 0.1, 0.2, 0.5]
    (tmp_path / "apart.txt").write_text("\n".join(lines) + "\n")
    (tmp_path / "apart.pred").write_text("\n".join(map(str, scores)) + "\n")
    order = [0, 2, 4, 1, 3]  # the same documents, each query's lines together
    (tmp_path / "together.txt").write_text("\n".join(lines[i] for i in order) + "\n")
    (tmp_path / "together.pred").write_text("\n".join(str(scores[i]) for i in order) + "\n")
    args = ["--metrics", "ndcg@1,map", "--format", "json"]
    assert main(["evaluate", "--data", str(tmp_path / "apart.txt"), "--predictions",
                 str(tmp_path / "apart.pred"), *args]) == 2
    assert "--regroup of smoothrank predict and evaluate" in capsys.readouterr().err
    assert main(["evaluate", "--data", str(tmp_path / "apart.txt"), "--predictions",
                 str(tmp_path / "apart.pred"), "--regroup", *args]) == 0
    apart = json.loads(capsys.readouterr().out)["metrics"]
    assert main(["evaluate", "--data", str(tmp_path / "together.txt"), "--predictions",
                 str(tmp_path / "together.pred"), *args]) == 0
    assert apart == json.loads(capsys.readouterr().out)["metrics"]
    # predict: one score per input line, in line order, as for the file with its queries together.
    run_dir = tmp_path / "run"
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"data": {"train": str(tmp_path / "together.txt")},
                                      "model": {"kind": "linear"},
                                      "training": {"epochs": 1, "list_size": 4, "num_threads": 1},
                                      "output": {"run_dir": str(run_dir)}}))
    assert main(["train", str(config), "--quiet"]) == 0
    for name in ("apart", "together"):
        extra = ["--regroup"] if name == "apart" else []
        assert main(["predict", str(run_dir / "model.pt"), str(tmp_path / f"{name}.txt"), "--out",
                     str(tmp_path / f"{name}.out"), *extra]) == 0
    apart_scores = np.loadtxt(tmp_path / "apart.out")
    np.testing.assert_array_equal(apart_scores[order], np.loadtxt(tmp_path / "together.out"))


def test_a_run_folder_in_use_by_another_process_is_refused(letor, tmp_path, capsys):
    # A review found no lock: a second command resumed the same run, deleted the first one's
    # temporary checkpoint mid-write (its rename then failed) and trained everything twice.
    from smoothrank._atomic import folder_lock

    run_dir = tmp_path / "run"
    config = write_config(tmp_path / "c.yaml", letor, run_dir, training={
        "epochs": 3, "batch_size": 8, "list_size": 16, "num_threads": 1})
    from smoothrank.training import load_config, train

    train(load_config(config), run_dir=run_dir, quiet=True, stop_after_epoch=1)
    in_flight = run_dir / ".checkpoint.pt.0123456789abcdef.tmp"
    in_flight.write_bytes(b"being written")
    with folder_held_by_another_process(run_dir, tmp_path):
        assert main(["train", str(config), "--quiet", "--resume"]) == 2
        err = capsys.readouterr().err
        assert f"{run_dir} is in use by another smoothrank process (a training run)" in err, err
        assert in_flight.read_bytes() == b"being written"  # left alone
    with folder_lock(run_dir, "test"):  # released with its holder
        pass
    assert main(["train", str(config), "--quiet", "--resume"]) == 0
    assert not in_flight.exists()  # a stale temporary file once nobody holds the folder



def test_without_a_validation_split_the_cli_does_not_claim_validation_selection(letor, tmp_path, capsys):
    # It printed "(selected by validation ndcg@10)" where summary.json said "last epoch (no validation
    # split)".
    data = {k: v for k, v in letor.items() if k != "valid"}
    config = write_config(tmp_path / "c.yaml", data, tmp_path / "run", training={
        "epochs": 2, "batch_size": 8, "list_size": 16, "num_threads": 1})
    assert main(["train", str(config)]) == 0
    out = capsys.readouterr().out
    assert "best epoch 2 of 2 (the last epoch: no validation split to select by)" in out, out
    assert "selected by validation" not in out
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["selected_by"] == "last epoch (no validation split)"
