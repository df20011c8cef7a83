"""``smoothrank predict`` scores and writes a range of queries at a time: the same bytes as scoring
every row first and writing them whole."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import write_fold1_slices

from smoothrank.cli import main
from smoothrank.data import load_letor, write_predictions, write_trec_run
from smoothrank.training import inference
from smoothrank.training.artifact import load_model
from smoothrank.training.config import config_from_dict
from smoothrank.training.trainer import train


@pytest.fixture(scope="module")
def trained(tmp_path_factory, shared_dir) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("stream")
    files = write_fold1_slices(shared_dir, folder, train=(0, 30), valid=10, test=25)
    models = {}
    for kind in ("mlp", "context_aware"):
        model = {"kind": "mlp", "hidden": [8]} if kind == "mlp" else \
            {"kind": "context_aware", "input_dim": 8, "n_blocks": 1, "hidden": 16}
        config = config_from_dict({
            "seed": 0, "data": {"train": str(files["train"])}, "model": model, "loss": {"name": "list_net"},
            "transforms": ["signed_log1p", "standardize", "query_minmax"],
            "training": {"epochs": 1, "batch_size": 8, "list_size": 16, "num_threads": 1},
            "output": {"run_dir": str(folder / kind)}})
        train(config, quiet=True)
        models[kind] = folder / kind / "model.pt"
    # Lines of queries apart in the file (read with --regroup): rows are not in line order.
    lines = files["test"].read_text().splitlines(keepends=True)
    mixed = folder / "mixed.txt"
    mixed.write_text("".join(lines[:12] + lines[40:47] + lines[12:40] + lines[47:]))
    return {**models, "test": files["test"], "mixed": mixed}


def _before(model: Path, data: Path, out: Path, *, trec: bool, regroup: bool) -> bytes:
    """What predict wrote with every score computed first (RankingModel.score), then written whole."""
    loaded = load_model(model)
    dataset = load_letor(data, zero_based=loaded.index_base == 0, regroup=regroup, allow_real_labels=True,
                         allow_negative_labels=True, cache=False)
    scores = loaded.score(dataset)
    if trec:
        write_trec_run(out, dataset, scores, tag="smoothrank")
    else:
        write_predictions(out, scores[np.argsort(dataset.line_numbers, kind="stable")])
    return out.read_bytes()


@pytest.mark.parametrize("kind", ["mlp", "context_aware"])
def test_streamed_predictions_are_the_bytes_of_scoring_everything_first(trained, tmp_path, monkeypatch, kind):
    from smoothrank.data import writers

    monkeypatch.setattr(writers, "_LINES_PER_WRITE", 50)  # lines written in blocks (of 65,536 otherwise)
    cases = [("test", False, ".txt", []), ("test", True, ".txt", ["--format", "trec"]),
             ("test", False, ".txt.gz", []), ("mixed", False, ".txt", ["--regroup"])]
    for data, trec, suffix, extra in cases:
        expected = _before(trained[kind], trained[data], tmp_path / f"expected{suffix}", trec=trec,
                           regroup="--regroup" in extra)
        for chunk in (1, 3, 7, 2048):  # 25 queries: ranges of one, a few, and all of them
            monkeypatch.setattr(inference, "QUERIES_PER_CHUNK", chunk)
            out = tmp_path / f"out{suffix}"
            assert main(["predict", str(trained[kind]), str(trained[data]), "--out", str(out), *extra]) == 0
            assert out.read_bytes() == expected, (data, extra, suffix, chunk)


def test_a_failed_chunk_leaves_no_output(trained, tmp_path, monkeypatch, capsys):
    # An error after some ranges were written leaves neither the output nor a temporary file.
    real = inference.scored_chunks

    def failing(*args, **kwargs):
        chunks = real(*args, **kwargs, queries_per_chunk=5)
        yield next(chunks)
        raise inference.NonFiniteScoreError("test.txt:9", float("nan"))

    monkeypatch.setattr(inference, "scored_chunks", failing)
    out = tmp_path / "p.txt"
    assert main(["predict", str(trained["mlp"]), str(trained["test"]), "--out", str(out)]) != 0
    assert "test.txt:9: the model scored this document nan" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_write_scores_refuses_ranges_out_of_order_and_writes_nothing(tmp_path):
    from smoothrank.data import Dataset
    from smoothrank.data.writers import write_scores
    from smoothrank.errors import SmoothrankError

    ds = Dataset.from_arrays(np.zeros((5, 1)), np.zeros(5), [1, 1, 2, 3, 3])
    out = tmp_path / "p.txt"
    write_scores(out, ds, [(0, 2, np.array([1.0, 2.0, 3.0])), (2, 3, np.array([4.0, 5.0]))])
    assert out.read_text() == "1.0\n2.0\n3.0\n4.0\n5.0\n"
    out.unlink()
    with pytest.raises(SmoothrankError, match=r"chunks: expected the queries from 0 on, got 1\.\.3"):
        write_scores(out, ds, [(1, 3, np.ones(3))])
    with pytest.raises(SmoothrankError, match=r"chunks: the scores of queries 2\.\. of 3 are missing"):
        write_scores(out, ds, [(0, 2, np.ones(3))])
    with pytest.raises(SmoothrankError, match=r"scores: expected 3 scores"):
        write_scores(out, ds, [(0, 2, np.ones(2))])
    assert list(tmp_path.iterdir()) == []


def test_write_scores_refuses_rows_of_several_files(tmp_path):
    # concat_datasets keeps each part's line numbers: ordering by them would interleave the files.
    from smoothrank.data import Dataset, concat_datasets
    from smoothrank.data.writers import write_scores
    from smoothrank.errors import SmoothrankError

    a = Dataset.from_arrays(np.zeros((2, 1)), np.array([0, 1.0]), ["a", "a"])
    b = Dataset.from_arrays(np.zeros((2, 1)), np.array([0, 1.0]), ["b", "b"])
    with pytest.raises(SmoothrankError, match=r"^dataset: .* repeats line numbers \(rows of several files\)"):
        write_scores(tmp_path / "p.txt", concat_datasets([a, b]), [(0, 2, np.arange(4.0))])
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("bad", [0, -3, 2.5, True])
def test_scored_chunks_refuses_a_bad_chunk_size_before_scoring(bad):
    from smoothrank.data import Dataset
    from smoothrank.errors import SmoothrankError

    def never(features, mask):  # the model is not called: the argument is checked first
        raise AssertionError("scored")

    model = torch.nn.Module()
    model.forward = never  # type: ignore[method-assign]
    ds = Dataset.from_arrays(np.zeros((3, 1)), np.zeros(3), [1, 1, 2])
    with pytest.raises(SmoothrankError, match="queries_per_chunk: must be a positive integer"):
        next(inference.scored_chunks(model, ds, queries_per_chunk=bad))
