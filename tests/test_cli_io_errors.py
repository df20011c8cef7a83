"""Bad files and paths given to the CLI: one-line errors naming the file or the argument, no
traceback, nothing half-written (damaged gzip, non-model files, output paths, run directories,
demo options, summary CSVs)."""

from __future__ import annotations

import errno
import gzip
import os
import stat
import threading
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import write_synthetic_folds, write_synthetic_letor

from smoothrank import _atomic
from smoothrank.cli import main
from smoothrank.errors import DataFormatError


def _error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("smoothrank: error: ") and "Traceback" not in err, err
    return err


@pytest.fixture(scope="module")
def folds(tmp_path_factory) -> Path:
    return write_synthetic_folds(tmp_path_factory.mktemp("io-letor"), seed=0, queries=(6, 3, 3), docs=5)


def _config(path: Path, folds: Path, run_dir: Path | str, **data: str) -> Path:
    config = {
        "seed": 1,
        "data": {"train": str(folds / "train.txt"), "valid": str(folds / "vali.txt"),
                 "test": str(folds / "test.txt"), **data},
        "transforms": [],
        "model": {"kind": "linear"},
        "loss": {"name": "neural_ndcg"},
        "training": {"epochs": 1, "batch_size": 8, "list_size": 8, "num_threads": 1},
        "evaluation": {"metrics": ["ndcg@10"]},
        "output": {"run_dir": str(run_dir)},
    }
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="module")
def model(tmp_path_factory, folds) -> Path:
    root = tmp_path_factory.mktemp("io-model")
    assert main(["train", str(_config(root / "c.yaml", folds, root / "run")), "--quiet"]) == 0
    return root / "run" / "model.pt"


def _gzip_damaged(source: Path, target: Path, damage: str) -> Path:
    data = bytearray(gzip.compress(source.read_bytes(), mtime=0))
    if damage == "truncated":
        data = data[: len(data) * 2 // 3]
    else:  # one flipped byte of the CRC-32 trailer
        data[-6] ^= 0xFF
    target.write_bytes(bytes(data))
    return target


# ------------------------------------------------------------------------------ 1. damaged gzip
@pytest.mark.parametrize("damage", ["truncated", "crc"])
def test_damaged_gzip_data_file_names_the_file(folds, tmp_path, capsys, damage):
    data = _gzip_damaged(folds / "test.txt", tmp_path / "test.txt.gz", damage)
    predictions = tmp_path / "p.pred"
    predictions.write_text("0\n" * 15)
    assert main(["evaluate", "--data", str(data), "--predictions", str(predictions)]) == 2
    assert f"{data}: corrupt or truncated gzip file (" in _error(capsys)


def test_damaged_gzip_on_the_fast_path(tmp_path):
    # Files of at least FAST_MIN_BYTES go through the compiled scanner first, in chunks.
    from smoothrank.data import load_letor
    from smoothrank.data.letor import FAST_MIN_BYTES

    plain = tmp_path / "big.txt"
    write_synthetic_letor(plain, np.random.default_rng(0), 200, 10, 1)
    assert plain.stat().st_size >= FAST_MIN_BYTES
    damaged = _gzip_damaged(plain, tmp_path / "big.txt.gz", "truncated")
    with pytest.raises(DataFormatError, match=r"big\.txt\.gz: corrupt or truncated gzip file"):
        load_letor(damaged, cache=False)


def test_damaged_gzip_through_predict_and_train(folds, model, tmp_path, capsys):
    data = _gzip_damaged(folds / "test.txt", tmp_path / "test.txt.gz", "truncated")
    out = tmp_path / "p.pred"
    assert main(["predict", str(model), str(data), "--out", str(out)]) == 2
    assert f"{data}: corrupt or truncated gzip file" in _error(capsys)
    assert not out.exists()
    config = _config(tmp_path / "c.yaml", folds, tmp_path / "run", test=str(data))
    assert main(["train", str(config), "--quiet"]) == 2
    assert f"{data}: corrupt or truncated gzip file" in _error(capsys)


def test_damaged_gzip_prediction_file_names_the_file(folds, tmp_path, capsys):
    predictions = tmp_path / "p.pred"
    predictions.write_text("0.5\n" * 15)
    damaged = _gzip_damaged(predictions, tmp_path / "p.pred.gz", "truncated")
    assert main(["evaluate", "--data", str(folds / "test.txt"), "--predictions", str(damaged)]) == 2
    assert f"{damaged}: corrupt or truncated gzip file" in _error(capsys)


# ------------------------------------------------------------------------------ 2. model files
def test_a_file_that_is_not_a_model_is_a_clear_error(folds, tmp_path, capsys):
    not_model = tmp_path / "c.yaml"
    not_model.write_text("seed: 1\nmodel: {kind: linear}\n")  # the weights-only unpickler: IndexError
    assert main(["predict", str(not_model), str(folds / "test.txt"), "--out", str(tmp_path / "p")]) == 2
    assert f"{not_model}: not a smoothrank model file" in _error(capsys)


def test_a_truncated_model_file_is_named(folds, model, tmp_path, capsys):
    # torch's zip reader raises OSError("Invalid argument") naming no file on some cuts: the error
    # printed "smoothrank: error: Invalid argument" without the path.
    data = model.read_bytes()
    for size in range(0, len(data), len(data) // 20):  # the later cuts raise that OSError
        cut = tmp_path / f"cut{size}.pt"
        cut.write_bytes(data[:size])
        assert main(["predict", str(cut), str(folds / "test.txt"), "--out", str(tmp_path / "p")]) == 2
        assert f"{cut}: not a smoothrank model file" in _error(capsys)


def test_an_oserror_naming_no_file_while_loading_names_the_model(folds, model, tmp_path, capsys, monkeypatch):
    # What torch's zip reader raised on a cut 6.6 kB MLP model.pt (cuts past about 4.1 kB).
    from smoothrank.training import _io

    def cut_zip(*_args, **_kwargs):
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(_io.torch, "load", cut_zip)
    assert main(["predict", str(model), str(folds / "test.txt"), "--out", str(tmp_path / "p")]) == 2
    assert f"{model}: not a smoothrank model file (Invalid argument)" in _error(capsys)


def test_a_directory_given_as_model_is_named(folds, model, tmp_path, capsys):
    out = str(tmp_path / "p")
    assert main(["predict", str(model.parent), str(folds / "test.txt"), "--out", out]) == 2
    err = _error(capsys)
    assert f"{model.parent}: is a directory, not a model file" in err and str(model) in err
    assert main(["predict", str(tmp_path), str(folds / "test.txt"), "--out", out]) == 2
    assert f"{tmp_path}: is a directory" in _error(capsys)


# ------------------------------------------------------------------------------ 3. output paths
def test_predict_out_empty_path(folds, model, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["predict", str(model), str(folds / "test.txt"), "--out", ""]) == 2
    assert "--out: empty output path" in _error(capsys)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("where, message", [
    ("file/x.pred", "cannot write {out}: {root}/file is not a directory"),
    ("file/sub/x.pred", "cannot write {out}: {root}/file is not a directory"),
    ("missing/x.pred", "cannot write {out}: the folder {root}/missing does not exist"),
    ("folder", "{out} is a directory, not a file"),
])
def test_predict_out_in_a_bad_place_names_the_users_path(folds, model, tmp_path, capsys, where, message):
    (tmp_path / "file").write_text("keep")
    (tmp_path / "folder").mkdir()
    out = tmp_path / where
    assert main(["predict", str(model), str(folds / "test.txt"), "--out", str(out)]) == 2
    err = _error(capsys)
    assert "--out: " + message.format(out=out, root=tmp_path) in err and ".tmp" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "folder"]
    assert (tmp_path / "file").read_text() == "keep" and list((tmp_path / "folder").iterdir()) == []


def test_atomic_writer_errors_name_the_destination(tmp_path):
    (tmp_path / "file").write_text("keep")
    for target, error in ((tmp_path / "missing" / "x", FileNotFoundError),
                          (tmp_path / "file" / "x", NotADirectoryError),
                          (tmp_path, IsADirectoryError)):
        with pytest.raises(error) as info:
            _atomic.write_text_atomic(target, "x")
        assert info.value.filename == str(target)
    with pytest.raises(FileNotFoundError):
        _atomic.write_text_atomic("", "x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_predict_into_a_fifo_writes_through_it(folds, model, tmp_path):
    # A FIFO (like /dev/null, a device) must be written in place, not replaced by a regular file.
    fifo = tmp_path / "scores.fifo"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    assert main(["predict", str(model), str(folds / "test.txt"), "--out", str(fifo)]) == 0
    reader.join(timeout=30)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert received and len(received[0].splitlines()) == 15
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scores.fifo"]


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc/self/fd (Linux)")
def test_predict_into_a_pipe_through_its_proc_link(folds, model, tmp_path, capsys):
    # /dev/stdout on a pipe is a link to /proc/PID/fd/1, whose target "pipe:[N]" is no path: the
    # writer resolved the link and failed with "No such file or directory: /proc/.../pipe:[N]".
    read_end, write_end = os.pipe()
    try:
        out = f"/proc/self/fd/{write_end}"
        assert main(["predict", str(model), str(folds / "test.txt"), "--out", out]) == 0
    finally:
        os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        assert len(pipe.read().splitlines()) == 15
    assert list(tmp_path.iterdir()) == []


def _evaluate_from_a_pipe(data: Path, payload: bytes) -> int:
    """``smoothrank evaluate`` with its predictions read from a pipe that a thread fills."""
    read_end, write_end = os.pipe()
    writer = threading.Thread(target=lambda: (os.write(write_end, payload), os.close(write_end)))
    writer.start()
    try:
        return main(["evaluate", "--data", str(data), "--predictions", f"/proc/self/fd/{read_end}"])
    finally:
        writer.join(timeout=30)
        os.close(read_end)


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc/self/fd (Linux)")
def test_evaluate_reads_predictions_from_a_pipe(folds, tmp_path, capsys):
    # The sniff for gzip read the pipe's first buffer, then the file was opened again: the scores
    # lost their start, and the count error said the file had fewer lines than it had.
    scores = "".join(f"{0.1 * i}\n" for i in range(15)).encode()
    from_file = tmp_path / "p.pred"
    from_file.write_bytes(scores)
    assert main(["evaluate", "--data", str(folds / "test.txt"), "--predictions", str(from_file)]) == 0
    expected = capsys.readouterr().out.splitlines()[2:]  # the metrics, after the header lines
    for payload in (scores, gzip.compress(scores)):
        assert _evaluate_from_a_pipe(folds / "test.txt", payload) == 0
        assert capsys.readouterr().out.splitlines()[2:] == expected
    assert _evaluate_from_a_pipe(folds / "test.txt", scores + b"0.5\n") == 2
    assert "expected 15 scores (one per document line), the file has 16" in _error(capsys)


def test_a_character_device_is_written_in_place(tmp_path, monkeypatch):
    # What /dev/null is, simulated on a regular file (a test must never risk replacing /dev/null).
    target = tmp_path / "device"
    target.write_text("old")
    inode = target.stat().st_ino
    real_mode = _atomic._mode
    monkeypatch.setattr(_atomic, "_mode", lambda path: stat.S_IFCHR | 0o666 if Path(path) == target
                        else real_mode(path))
    _atomic.write_text_atomic(target, "new\n")
    assert target.stat().st_ino == inode and target.read_text() == "new\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["device"]


def test_a_full_disk_names_the_destination_and_keeps_the_old_file(tmp_path, monkeypatch):
    # ENOSPC comes from write/flush/fsync with no file name; the error must name the user's path.
    target = tmp_path / "scores.txt"
    target.write_text("old")

    def full(_fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(_atomic.os, "fsync", full)
    with pytest.raises(OSError) as info:
        _atomic.write_text_atomic(target, "new")
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(target)
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["scores.txt"]


def test_an_error_about_another_file_keeps_its_name(tmp_path):
    with pytest.raises(FileNotFoundError) as info, _atomic.atomic_writer(tmp_path / "out.txt"):
        (tmp_path / "missing.txt").read_bytes()
    assert info.value.filename == str(tmp_path / "missing.txt")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs Linux's /dev/full")
def test_predict_to_a_full_device_is_a_one_line_error(folds, model, capsys):
    assert main(["predict", str(model), str(folds / "test.txt"), "--out", "/dev/full"]) == 2
    assert "No space left on device: /dev/full" in _error(capsys)


def test_a_symlinked_output_keeps_its_link(tmp_path):
    real = tmp_path / "real.txt"
    real.write_text("old")
    (tmp_path / "link.txt").symlink_to(real)
    _atomic.write_text_atomic(tmp_path / "link.txt", "new")
    assert (tmp_path / "link.txt").is_symlink() and real.read_text() == "new"


@pytest.mark.parametrize("where, message", [
    ("file/x.png", "--out: cannot write {out}: {root}/file is not a directory"),
    ("missing/x.png", "--out: cannot write {out}: the folder {root}/missing does not exist"),
])
def test_plot_out_in_a_bad_place_is_refused_like_predict(tmp_path, capsys, where, message):
    (tmp_path / "file").write_text("keep")
    out = tmp_path / where
    assert main(["plot", "figure1", "--out", str(out)]) == 2
    assert message.format(out=out, root=tmp_path) in _error(capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_plot_library_refuses_a_missing_folder(tmp_path):
    from smoothrank import plots
    from smoothrank.errors import SmoothrankError

    with pytest.raises(SmoothrankError, match=r"the folder .*missing does not exist"):
        plots.neuralndcg_figure1(tmp_path / "missing" / "f.png", xs=np.array([0.0, 1.0]))
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------ 4. run directories
def test_train_run_dir_that_is_a_file(folds, tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("keep")
    config = _config(tmp_path / "c.yaml", folds, tmp_path / "unused")
    assert main(["train", str(config), "--quiet", "--run-dir", str(blocker)]) == 2
    assert f"the run directory {blocker} exists and is not a directory" in _error(capsys)
    assert main(["train", str(config), "--quiet", "--run-dir", str(blocker / "run")]) == 2
    assert f"{blocker} is not a directory" in _error(capsys)
    assert blocker.read_text() == "keep" and sorted(p.name for p in tmp_path.iterdir()) == ["c.yaml", "file"]


def test_train_empty_run_dir_writes_nothing(folds, tmp_path, capsys, monkeypatch):
    from smoothrank.errors import ConfigError
    from smoothrank.training import train
    from smoothrank.training.config import load_config

    config = _config(tmp_path / "c.yaml", folds, tmp_path / "unused")
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    assert main(["train", str(config), "--quiet", "--run-dir", ""]) == 2
    assert "empty" in _error(capsys)
    for empty in ("", " "):  # the library call, where no CLI or config check comes first
        with pytest.raises(ConfigError, match="the run directory is an empty path"):
            train(load_config(config), run_dir=empty, quiet=True)
    assert list(work.iterdir()) == []


def test_demo_run_dir_that_is_a_file_or_empty(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("keep")
    assert main(["demo", "--run-dir", str(blocker), "--quiet", "--epochs", "1", "--losses", "rmse"]) == 2
    assert f"--run-dir: {blocker} is not a directory" in _error(capsys)
    assert main(["demo", "--run-dir", "", "--quiet", "--epochs", "1", "--losses", "rmse"]) == 2
    assert "--run-dir: empty path" in _error(capsys)


def test_demo_rerun_into_its_run_dir_gives_demo_advice(tmp_path, capsys):
    (tmp_path / "fold1" / "rmse").mkdir(parents=True)
    (tmp_path / "fold1" / "rmse" / "checkpoint.pt").write_bytes(b"")
    assert main(["demo", "--run-dir", str(tmp_path), "--losses", "rmse", "--quiet", "--epochs", "1"]) == 2
    err = _error(capsys)
    assert f"--run-dir: {tmp_path} already holds demo runs (fold1/rmse)" in err
    assert "another --run-dir" in err and "--resume" not in err and "output.run_dir" not in err


@pytest.mark.parametrize("damage", ["garbage", "empty", "truncated", "a model file"])
def test_a_damaged_checkpoint_is_named_on_resume(folds, model, tmp_path, capsys, damage):
    # A raw UnpicklingError/EOFError traceback, or "smoothrank: error: Invalid argument" naming no file.
    config = _config(tmp_path / "c.yaml", folds, tmp_path / "run")
    assert main(["train", str(config), "--quiet"]) == 0
    checkpoint = tmp_path / "run" / "checkpoint.pt"
    good = checkpoint.read_bytes()
    checkpoint.write_bytes({"garbage": b"garbage\n", "empty": b"", "truncated": good[: len(good) // 2],
                            "a model file": model.read_bytes()}[damage])
    assert main(["train", str(config), "--resume", "--quiet"]) == 2
    assert f"{checkpoint}: damaged or not a smoothrank training checkpoint" in _error(capsys)
    checkpoint.write_bytes(good)
    assert main(["train", str(config), "--resume", "--quiet"]) == 0


def test_a_label_with_an_infinite_gain_is_named_by_file_and_line(folds, tmp_path, capsys):
    # "gain: the gain of some label is not finite" named no file, and came after the run folder.
    lines = (folds / "train.txt").read_text().splitlines(keepends=True)
    lines[2] = "200" + lines[2][lines[2].index(" "):]
    big = tmp_path / "big.txt"
    big.write_text("".join(lines))
    config = _config(tmp_path / "c.yaml", folds, tmp_path / "run", train=str(big))
    assert main(["train", str(config), "--quiet"]) == 2
    assert (f"data.train: {big}:3: label 200 has no finite gain under loss.options.gain ('exp2') in float32"
            in _error(capsys))
    assert not (tmp_path / "run").exists()
    # ListNet has no gain; the LETOR 4.0 metrics compute 2^200 - 1 in float64.
    assert main(["train", str(config), "--quiet", "loss.name=list_net"]) == 0
    # The loss sees the training split only: label 200 in the test split trained fine before.
    test_only = _config(tmp_path / "t.yaml", folds, tmp_path / "run-t", test=str(big))
    assert main(["train", str(test_only), "--quiet", "loss.name=lambda_rank"]) == 0
    lines[2] = "1100" + lines[2][lines[2].index(" "):]
    big.write_text("".join(lines))
    predictions = tmp_path / "p.pred"
    predictions.write_text("0.5\n" * len(lines))
    evaluate = ["evaluate", "--data", str(big), "--predictions", str(predictions)]
    assert main(evaluate) == 2
    assert f"--data: {big}:3: label 1100 has no finite gain under --convention letor4" in _error(capsys)
    assert main([*evaluate, "--convention", "trec"]) == 0
    # No gain is computed for MAP and P@k: nothing to refuse (in evaluate or in training).
    assert main([*evaluate, "--metrics", "map,p@3"]) == 0
    big_test = str(_config(tmp_path / "m.yaml", folds, tmp_path / "run-m", test=str(big)))
    no_gain = ["evaluation.metrics=[map,p@3]", "evaluation.select_by=map", "loss.name=list_net"]
    assert main(["train", big_test, "--quiet", *no_gain]) == 0
    elsewhere = "output.run_dir=" + str(tmp_path / "n")
    assert main(["train", big_test, "--quiet", "loss.name=list_net", elsewhere]) == 2
    assert f"data.test: {big}:3: label 1100 has no finite gain under evaluation.convention" in _error(capsys)


# ------------------------------------------------------------------------------ 5. demo options
@pytest.mark.parametrize("args, message", [
    (["--folds", "1-99999999999999999999"], "--folds: expected a range within 1-5"),
    (["--folds", "0-2"], "--folds: expected a range within 1-5"),
    (["--seed", "99999999999999999999"], "--seed: expected an integer in [0, 2**32 - 1]"),
    (["--seed", "-1"], "--seed: expected an integer in [0, 2**32 - 1]"),
    (["--losses", ""], "--losses: no loss given"),
    (["--losses", ","], "--losses: no loss given"),
    (["--losses", "list_net,rmse,list_net"], "--losses: list_net listed twice"),  # before any training
])
def test_demo_options_out_of_range(capsys, args, message):
    assert main(["demo", "--quiet", "--epochs", "1", *args]) == 2
    assert message in _error(capsys)


# ------------------------------------------------------------------------------ 6. summary CSVs
_HEADER = "dataset,method,kind,split,metric,mean,std,n_folds\n"
_ROW = "mq2008,a,neural,test,map,0.4,0.01,2\n"


@pytest.mark.parametrize("row, message", [
    ("mq2008,a,neural,test,ndcg@1,abc,0.01,2\n", ":3: column 'mean': not a number: 'abc'"),
    ("mq2008,a,neural,test,ndcg@1,nan,0.01,2\n", ":3: column 'mean': not a finite number: 'nan'"),
    ("mq2008,a,neural,test,ndcg@1,inf,0.01,2\n", ":3: column 'mean': not a finite number: 'inf'"),
    ("mq2008,a,neural,test,ndcg@1,0.5,x,2\n", ":3: column 'std': not a number: 'x'"),
    ("mq2008,a,neural,test,ndcg@1,0.5,-0.1,2\n", ":3: column 'std': a negative standard deviation"),
])
@pytest.mark.parametrize("figure", ["summary", "forest"])
def test_summary_csv_bad_cell_names_file_line_and_column(tmp_path, capsys, figure, row, message):
    summary = tmp_path / "summary.csv"
    summary.write_text(_HEADER + _ROW + row)
    assert main(["plot", figure, str(summary), "--out", str(tmp_path / "f.png")]) == 2
    assert f"{summary}{message}" in _error(capsys)
    assert not (tmp_path / "f.png").exists()


@pytest.mark.parametrize("figure, extra", [("summary", []), ("forest", []), ("forest", ["--published"])])
def test_summary_csv_not_utf8_names_file_and_line(tmp_path, capsys, figure, extra):
    summary = tmp_path / "summary.csv"
    summary.write_bytes((_HEADER + _ROW).encode() + "mq2008,é,neural,test,map,0.1,0.1,2\n".encode("latin-1"))
    assert main(["plot", figure, str(summary), "--out", str(tmp_path / "f.png"), *extra]) == 2
    assert f"{summary}:3: not UTF-8 text" in _error(capsys)


def test_published_with_an_unreadable_spec_is_a_clear_error(tmp_path, capsys):
    summary = tmp_path / "summary.csv"
    summary.write_text(_HEADER + _ROW)
    spec = tmp_path / "spec.yaml"
    for content, detail in (("name: [unclosed\n", "line 2"), ("- a list\n", ""),
                            ("name: a\nname: b\n", "duplicate key 'name' (first given on line 1)")):
        spec.write_text(content)
        assert main(["plot", "forest", str(summary), "--out", str(tmp_path / "f.png"), "--published"]) == 2
        err = _error(capsys)
        assert str(spec) in err and detail in err


def test_metrics_log_not_utf8_names_file_and_line(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_bytes(b'{"epoch": 1, "loss": 0.1}\n{"epoch": 2, "note": "\xe9"}\n')
    assert main(["plot", "curves", str(run), "--out", str(tmp_path / "c.png")]) == 2
    assert f"{run / 'metrics.jsonl'}:2: not UTF-8 text" in _error(capsys)


def test_predict_reads_no_label_so_takes_any(folds, model, tmp_path):
    # Scoring reads no label: a real-valued or negative one was refused ("not an integer ...
    # allow_real_labels=True", an option predict has not), with a misleading feature-index suffix.
    lines = (folds / "test.txt").read_text().splitlines()
    odd = tmp_path / "odd.txt"
    odd.write_text("\n".join(["0.5" + lines[0][1:], "-1" + lines[1][1:], *lines[2:]]) + "\n")
    plain = tmp_path / "plain.pred"
    assert main(["predict", str(model), str(folds / "test.txt"), "--out", str(plain)]) == 0
    got = tmp_path / "odd.pred"
    assert main(["predict", str(model), str(odd), "--out", str(got)]) == 0
    assert got.read_text() == plain.read_text()  # the same features, the same scores


def test_predict_names_the_models_index_base_only_for_index_errors(folds, model, tmp_path, capsys):
    lines = (folds / "test.txt").read_text().splitlines()
    repeated = tmp_path / "repeated.txt"  # qid of line 1 again at the end: not an index error
    repeated.write_text("\n".join([*lines, lines[0]]) + "\n")
    assert main(["predict", str(model), str(repeated), "--out", str(tmp_path / "r.pred")]) == 2
    assert "feature indices of the model's training file" not in _error(capsys)
    nan_label = tmp_path / "zero_based_named.txt"  # a path holding the words: still not an index error
    nan_label.write_text("\n".join(["nan" + lines[0][1:], *lines[1:]]) + "\n")
    assert main(["predict", str(model), str(nan_label), "--out", str(tmp_path / "n.pred")]) == 2
    err = _error(capsys)
    assert "not finite" in err and "feature indices of the model's training file" not in err, err
    zero = tmp_path / "zero.txt"  # index 0 in a file read with the model's one-based indices
    zero.write_text(lines[0].replace(" 1:", " 0:", 1) + "\n")
    assert main(["predict", str(model), str(zero), "--out", str(tmp_path / "z.pred")]) == 2
    assert "feature indices of the model's training file, which start at 1" in _error(capsys)


# --- found by a fuzz audit of the CLI (2026-11-25) ---------------------------------------------------


@pytest.mark.parametrize("which", ["DATA", "MODEL"])
def test_predict_refuses_to_write_over_its_own_input(folds, model, tmp_path, capsys, which):
    # `--out` equal to the data file replaced the LETOR data by scores, exit 0 (the model file alike).
    import shutil

    data, model_copy = tmp_path / "victim.txt", tmp_path / "victim.pt"
    shutil.copy(folds / "test.txt", data)
    shutil.copy(model, model_copy)
    out = data if which == "DATA" else model_copy
    before = out.read_bytes()
    assert main(["predict", str(model_copy), str(data), "--out", str(out)]) == 2
    assert f"--out: {out} is the {which} file this command reads" in _error(capsys)
    assert out.read_bytes() == before
    os.link(out, tmp_path / "hard")  # the same file under another name
    assert main(["predict", str(model_copy), str(data), "--out", str(tmp_path / "hard")]) == 2
    assert f"is the {which} file" in _error(capsys)


def test_predict_refuses_a_bad_trec_tag_before_scoring(folds, model, tmp_path, capsys, monkeypatch):
    from smoothrank.training import artifact

    monkeypatch.setattr(artifact, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    out = tmp_path / "run.trec"
    assert main(["predict", str(model), str(folds / "test.txt"), "--out", str(out), "--format", "trec",
                 "--tag", "a b"]) == 2
    assert "--tag 'a b' is empty or contains whitespace" in _error(capsys) and not out.exists()


@pytest.mark.parametrize(("args", "message"), [
    (["figure1", "--temperature", "inf"], "--temperature: expected a positive finite number"),
    (["figure2", "--temperatures", "0.1,inf"], "--temperatures: expected positive finite numbers"),
    (["softrank", "--sigma", "inf"], "--sigma: expected a positive finite number"),
])
def test_plot_refuses_infinite_parameters_naming_the_option(tmp_path, capsys, args, message):
    assert main(["plot", *args, "--out", str(tmp_path / "f.png")]) == 2
    assert message in _error(capsys) and not (tmp_path / "f.png").exists()


def test_experiment_out_or_reuse_that_is_a_file_names_the_option(folds, tmp_path, capsys):
    from conftest import two_method_spec

    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(two_method_spec(folds, gbdt=[])))
    for extra in ([], ["--dry-run"]):
        assert main(["experiment", str(spec), "--out", str(spec), *extra]) == 2
        assert f"--out: {spec} is not a directory" in _error(capsys)  # was "File exists: ..."
    assert main(["experiment", str(spec), "--out", str(tmp_path / "o"), "--reuse", str(spec)]) == 2
    assert f"--reuse {spec}: not a folder" in _error(capsys)  # was "no such folder"


def test_training_data_without_features_names_the_file(tmp_path, capsys):
    data = tmp_path / "nofeatures.txt"
    data.write_text("0 qid:1\n1 qid:1\n")
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"data": {"train": str(data)}, "model": {"kind": "linear"},
                                      "training": {"epochs": 1}}))
    assert main(["train", str(config), "--quiet", "--run-dir", str(tmp_path / "run")]) == 2
    assert f"data.train ({data}): no feature columns" in _error(capsys)
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(("override", "problem"), [
    ("training.epochs=1:30", "training.epochs: expected a number, not a string"),  # YAML 1.1: 90
    ("optimizer.lr=0b1", "optimizer.lr: expected a number, not a string"),  # YAML 1.1: 1
])
def test_yaml_1_1_base_60_and_binary_numbers_are_not_numbers(folds, tmp_path, capsys, override, problem):
    assert main(["train", str(_config(tmp_path / "c.yaml", folds, tmp_path / "run")), override]) == 2
    assert problem in _error(capsys) and not (tmp_path / "run").exists()


def test_yaml_numbers_follow_yaml_1_2():
    from smoothrank._yaml import safe_load

    read = safe_load("a: 010\nb: 0o17\nc: 0x1F\nd: 1_000\ne: 1e-3\nf: -.5\ng: .inf\nh: 1:30\ni: 0x_\n")
    assert read == {"a": 10, "b": 15, "c": 31, "d": 1000, "e": 0.001, "f": -0.5, "g": float("inf"),
                    "h": "1:30", "i": "0x_"}  # 1.1 read 010 as 8 and 1:30 as 90
    assert all(type(read[k]) is int for k in "abcd") and all(type(read[k]) is float for k in "efg")


def test_a_runs_config_yaml_reads_back_with_number_like_strings(folds, tmp_path, capsys, monkeypatch):
    # A review: config.yaml was dumped by YAML 1.1's rules, which leave "09" and "-.5" plain, and the
    # YAML 1.2 reader then loaded them as numbers ("output.run_dir: Input should be a valid string").
    import shutil

    from smoothrank._yaml import safe_dump, safe_load

    strings = {k: k for k in ("09", "0o17", "-.5", "+.5", "1:30", "010", "-0x10", "0b1", "0x_", "true")}
    assert safe_load(safe_dump(strings)) == strings and yaml.safe_load(safe_dump(strings)) == strings
    for name in ("test.txt", "train.txt", "vali.txt"):
        shutil.copy(folds / name, tmp_path / name)
    config = _config(tmp_path / "c.yaml", folds, "09", train=str(tmp_path / "train.txt"))
    config.write_text(config.read_text().replace("run_dir: 09", "run_dir: '09'"))  # 1.1 left it plain
    monkeypatch.chdir(tmp_path)
    assert main(["train", str(config), "--quiet"]) == 0
    assert main(["train", str(tmp_path / "09" / "config.yaml"), "--quiet", "--run-dir", "again"]) == 0


@pytest.mark.parametrize(("text", "value"), [
    ("k: -._", "-._"), ("k: ._", "._"), ("k: +._e5", "+._e5"),  # strings, not a float() traceback
    ("k: !!int 0b1", 1), ("k: !!int -0x1F", -31), ("k: !!int 1:30", 90), ("k: !!float 1:30.5", 90.5),
])
def test_yaml_odd_numbers_and_explicit_tags_read_without_a_traceback(text, value):
    from smoothrank._yaml import safe_load

    assert safe_load(text) == {"k": value}  # an explicit tag is read as YAML 1.1 reads it
    with pytest.raises(yaml.YAMLError, match="'abc' is not a number"):
        safe_load("k: !!int abc")


@pytest.mark.parametrize("text", ["k: !!int", "k: !!float", "k: !!int ''", "k: !!float '_'"])
def test_yaml_explicit_number_tags_on_an_empty_value_are_an_error_naming_the_line(text):
    from smoothrank._yaml import safe_load

    with pytest.raises(yaml.YAMLError, match=r"(?s)is not a number for tag:yaml.org,2002:.*line 1"):
        safe_load(text)  # was PyYAML's IndexError traceback


def test_experiment_names_its_default_folder_when_no_out_was_given(folds, tmp_path, capsys, monkeypatch):
    from conftest import two_method_spec

    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(two_method_spec(folds, gbdt=[])))
    (tmp_path / "runs").write_text("a file where the default folder goes")
    monkeypatch.chdir(tmp_path)
    assert main(["experiment", str(spec), "--dry-run"]) == 2
    assert ("the default output folder runs/experiments/tiny (give --out): runs is not a directory"
            in _error(capsys))


@pytest.mark.parametrize("obj", [{"a": 1, "b": [1, 2]}, 3.5, "text"])
def test_a_plain_pickle_given_as_model_is_one_clear_error_without_library_warnings(folds, tmp_path, capsys,
                                                                                     obj):
    import pickle
    import warnings

    path = tmp_path / "thing.pkl"
    path.write_bytes(pickle.dumps(obj, protocol=4))
    with warnings.catch_warnings():
        warnings.simplefilter("always")  # as a fresh interpreter shows a UserWarning once
        assert main(["predict", str(path), str(folds / "test.txt"), "--out", str(tmp_path / "p.txt")]) == 2
    err = capsys.readouterr().err
    assert err == f"smoothrank: error: {path}: not a smoothrank model file (UnpicklingError)\n"
