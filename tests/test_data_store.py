"""The on-disk dataset store: memory-mapped entries, identity checks, sharing, eviction, failures."""

from __future__ import annotations

import errno
import os
import shutil

import numpy as np
import pytest

from smoothrank.data import letor, load_letor, store
from smoothrank.datasets import make_synthetic, write_synthetic_letor
from smoothrank.errors import SmoothrankError

FIELDS = ("features", "labels", "qids", "doc_ids", "offsets", "line_numbers")


@pytest.fixture(autouse=True)
def _tmp_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SMOOTHRANK_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("SMOOTHRANK_CACHE_SIZE", raising=False)


def _same(a, b):
    for name in FIELDS:
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    assert a.index_base == b.index_base


@pytest.fixture
def synthetic(tmp_path):
    # over FAST_MIN_BYTES: the compiled scanner; several chunks with a small chunk size (below)
    return write_synthetic_letor(tmp_path / "train.txt", 60, (5, 30), 12, seed=4)


def test_a_cached_read_is_read_only_memory_maps_equal_to_the_parse(synthetic, monkeypatch):
    monkeypatch.setattr(letor, "_CHUNK_BYTES", 20_000)  # queries straddle chunk boundaries
    memory = load_letor(synthetic, cache=False)
    first = load_letor(synthetic, cache=True)
    again = load_letor(synthetic, cache=True)
    for ds in (first, again):
        _same(ds, memory)
        assert isinstance(ds.features, np.memmap) and not ds.features.flags.writeable
        assert isinstance(ds.doc_ids, np.memmap) and isinstance(ds.line_numbers, np.memmap)
    assert len(store.entries()) == 1
    data = make_synthetic(60, (5, 30), 12, seed=4)
    np.testing.assert_array_equal(again.features, data.features)


def test_strict_parser_writes_the_store_too(tmp_path):
    text = "".join(f"{i % 3} qid:{i // 4} 2:{i} 1:0.5 #docid = d{i}\n" for i in range(40))  # unsorted
    path = tmp_path / "strict.txt"
    path.write_text(text)
    _same(load_letor(path, cache=True), load_letor(path, cache=False))
    cached = load_letor(path, cache=True)
    assert isinstance(cached.features, np.memmap) and cached.doc_ids[-1] == "d39"


def test_reader_options_that_parse_the_same_way_share_one_entry(synthetic):
    train = load_letor(synthetic, cache=True)
    # what predict and evaluate pass: the model's width and the training file's index base
    same = [{"n_features": 12, "zero_based": False}, {"regroup": True}, {"null_value": None},
            {"allow_real_labels": True, "allow_negative_labels": True}, {"zero_based": "auto"}]
    for options in same:
        _same(load_letor(synthetic, cache=True, **options), train)
    assert len(store.entries()) == 1
    wider = load_letor(synthetic, cache=True, n_features=15)
    assert wider.n_features == 15 and len(store.entries()) == 2
    shifted = load_letor(synthetic, cache=True, zero_based=True)
    np.testing.assert_array_equal(shifted.features[:, 1:], train.features)
    assert len(store.entries()) == 3
    # an option under which the file is an error is answered by the parser, with its line
    with pytest.raises(SmoothrankError, match=r"train\.txt:1: feature index in '12:.*' is beyond n_feat"):
        load_letor(synthetic, cache=True, n_features=11)
    assert len(store.entries()) == 3 and not list(store.cache_dir().glob(".tmp-*"))


def test_interleaved_and_null_entries_serve_only_matching_options(tmp_path):
    path = tmp_path / "odd.txt"
    path.write_text("1 qid:1 1:NULL 2:1\n0 qid:2 1:1 2:2\n2 qid:1 1:3 2:3\n")
    grouped = load_letor(path, cache=True, regroup=True)
    assert grouped.qids.tolist() == ["1", "2"] and grouped.line_numbers.tolist() == [1, 3, 2]
    with pytest.raises(SmoothrankError, match="reappears after other queries"):
        load_letor(path, cache=True)  # the regrouped entry is not served without regroup
    assert load_letor(path, cache=True, regroup=True, null_value=-1.0).features[0, 0] == -1.0
    assert load_letor(path, cache=True, regroup=True).features[0, 0] == 0.0


def test_a_changed_source_or_an_entry_copied_from_another_file_is_not_served(tmp_path, synthetic):
    load_letor(synthetic, cache=True)
    other = write_synthetic_letor(tmp_path / "other.txt", 20, 5, 12, seed=9)
    expected = load_letor(other, cache=False)
    load_letor(other, cache=True)
    (a, b) = sorted(store.entries(), key=lambda e: e.source)
    assert {a.source, b.source} == {os.path.realpath(other), os.path.realpath(synthetic)}
    # put train.txt's entry where other.txt's entry is looked up: refused (it names its source)
    wrong, right = (a, b) if a.source.endswith("train.txt") else (b, a)
    shutil.rmtree(right.path)
    shutil.copytree(wrong.path, right.path)
    _same(load_letor(other, cache=True), expected)
    # the same size and another modification time: the entry is stale, rebuilt
    text = other.read_bytes()
    other.write_bytes(text.replace(b"qid:1 ", b"qid:0 "))  # query 1 renamed 0: the same size
    os.utime(other, ns=(1, 1))
    assert load_letor(other, cache=True).qids[0] == "0"


def test_verify_compares_the_content_hash(synthetic):
    load_letor(synthetic, cache=True)
    (info,) = store.entries()
    # the default open does not hash the file; verify=True rebuilds an entry without a recorded hash
    verified = load_letor(synthetic, cache=True, verify=True)
    assert [e.path for e in store.entries()] != [info.path]
    stat = os.stat(synthetic)
    data = bytearray(synthetic.read_bytes())
    data[0:1] = b"4" if data[0:1] != b"4" else b"3"  # same size, same times: only the hash can tell
    synthetic.write_bytes(bytes(data))
    os.utime(synthetic, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert load_letor(synthetic, cache=True).labels[0] == verified.labels[0]  # the cheap check trusts it
    assert load_letor(synthetic, cache=True, verify=True).labels[0] == float(chr(data[0]))


def test_least_recently_used_entries_are_evicted(tmp_path, monkeypatch):
    paths = [write_synthetic_letor(tmp_path / f"f{i}.txt", 30, 10, 50, seed=i) for i in range(3)]
    load_letor(paths[0], cache=True)
    one = store.entries()[0].bytes
    monkeypatch.setenv("SMOOTHRANK_CACHE_SIZE", str(int(2.5 * one)))
    load_letor(paths[1], cache=True)
    os.utime(store.entries()[0].path / "used", (1, 1))  # f1 is older than f0 from here on
    load_letor(paths[0], cache=True)  # a use of f0
    load_letor(paths[2], cache=True)
    assert sorted(os.path.basename(e.source) for e in store.entries()) == ["f0.txt", "f2.txt"]
    # an entry larger than the limit is still kept while it is the one just written
    monkeypatch.setenv("SMOOTHRANK_CACHE_SIZE", "1K")
    load_letor(paths[1], cache=True)
    assert [os.path.basename(e.source) for e in store.entries()] == ["f1.txt"]
    monkeypatch.setenv("SMOOTHRANK_CACHE_SIZE", "lots")
    with pytest.raises(SmoothrankError, match="SMOOTHRANK_CACHE_SIZE"):
        load_letor(paths[0], cache=True)


def test_an_interrupted_conversion_leaves_no_entry(synthetic, monkeypatch):
    calls = []

    def interrupted(self, fields):
        calls.append(1)
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(store.EntryWriter, "commit", interrupted)
        with pytest.raises(KeyboardInterrupt):
            load_letor(synthetic, cache=True)
    assert calls and store.entries() == [] and list(store.cache_dir().iterdir()) == []
    # what a killed writer leaves: a temporary folder (of a process that is gone) and a folder
    # without a manifest under an entry's name; neither is served, both are cleaned up
    dead = store.cache_dir() / ".tmp-999999999-abc"
    dead.mkdir(parents=True)
    (dead / "features.raw").write_bytes(b"\0" * 100)
    prefix = store.entry_prefix(store.source_identity(synthetic))
    half = store.cache_dir() / f"{prefix}-00000000"
    half.mkdir()
    np.save(half / "features.npy", np.zeros((3, 12), np.float32))
    ds = load_letor(synthetic, cache=True)
    assert ds.n_docs > 3 and not dead.exists() and not half.exists()
    assert len(store.entries()) == 1


def test_a_full_disk_is_a_clear_error_and_leaves_no_entry(synthetic, monkeypatch):
    def full(fd, offset, length):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    with pytest.raises(SmoothrankError, match=r"no space left on the device while storing .*train\.txt"):
        load_letor(synthetic, cache=True)
    assert list(store.cache_dir().iterdir()) == []


def test_an_unwritable_store_warns_and_reads_into_memory(synthetic, tmp_path, monkeypatch):
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a folder")
    monkeypatch.setenv("SMOOTHRANK_CACHE", str(blocker / "cache"))
    with pytest.warns(UserWarning, match="could not write the dataset cache"):
        ds = load_letor(synthetic, cache=True)
    assert not isinstance(ds.features, np.memmap)


def test_cache_command_lists_and_clears(synthetic, capsys):
    from smoothrank.cli import main

    load_letor(synthetic, cache=True)
    assert main(["cache", "list"]) == 0
    out = capsys.readouterr().out
    assert "1 entry" in out and str(os.path.realpath(synthetic)) in out
    assert main(["cache", "clear"]) == 0
    assert "removed 1 entry" in capsys.readouterr().out and store.entries() == []


@pytest.mark.slow
def test_training_on_the_store_gives_the_model_of_in_memory_arrays(tmp_path):
    import torch

    from smoothrank.training import train
    from smoothrank.training.config import config_from_dict

    train_file = write_synthetic_letor(tmp_path / "tr.txt", 40, (5, 25), 10, seed=1)
    valid_file = write_synthetic_letor(tmp_path / "va.txt", 10, (5, 25), 10, seed=2)
    models = {}
    for cached in (True, False):
        splits = {"train": load_letor(train_file, cache=cached),
                  "valid": load_letor(valid_file, cache=cached)}
        assert isinstance(splits["train"].features, np.memmap) == cached
        config = config_from_dict({
            "seed": 0, "data": {"train": str(train_file), "valid": str(valid_file)},
            "model": {"kind": "mlp", "hidden": [8]}, "loss": {"name": "list_net"},
            "transforms": ["signed_log1p", "standardize"],
            "training": {"epochs": 1, "batch_size": 8, "list_size": 16},
            "output": {"run_dir": str(tmp_path / f"run-{cached}")}})
        models[cached] = train(config, quiet=True, splits=splits).model.state_dict()
    assert models[True].keys() == models[False].keys()
    for name in models[True]:
        assert torch.equal(models[True][name], models[False][name]), name
    # the transformed store splits were maps of temporary files, left nowhere
    assert not [p for p in store.cache_dir().iterdir() if p.name.startswith(".tmp-")]


# ------------------------------------------------------------------ inputs beyond one LETOR file
def test_shards_are_read_as_one_dataset(tmp_path):
    from smoothrank.data import concat_datasets

    for i in range(3):
        write_synthetic_letor(tmp_path / f"part-{i}.txt", 7 + i, (3, 9), 6, seed=i)
    files = [tmp_path / f"part-{i}.txt" for i in range(3)]
    expected = concat_datasets([load_letor(f, cache=False) for f in files])
    by_list = load_letor([str(f) for f in files], cache=False)
    _same(by_list, expected)
    assert by_list.n_queries == 7 + 8 + 9  # the qids 1..7 of every part stay lists of their own
    stored = load_letor(str(tmp_path / "part-*.txt"), cache=True)
    _same(stored, expected)
    assert isinstance(stored.features, np.memmap) and stored.source.count(" + ") == 2
    assert len(store.entries()) == 4  # the three files and their concatenation
    _same(load_letor(str(tmp_path / "part-*.txt"), cache=True), expected)
    assert len(store.entries()) == 4
    # a changed shard: the concatenation is rebuilt
    write_synthetic_letor(files[1], 3, 4, 6, seed=11)
    assert load_letor(str(tmp_path / "part-*.txt"), cache=True).n_queries == 7 + 3 + 9
    with pytest.raises(FileNotFoundError, match="No file matches"):
        load_letor(str(tmp_path / "nothing-*.txt"))
    # a narrower later shard takes the first one's width; an error names its own file and line
    (tmp_path / "narrow.txt").write_text("1 qid:1 1:1\n")
    assert load_letor([files[0], tmp_path / "narrow.txt"], cache=False).n_features == 6
    (tmp_path / "bad.txt").write_text("1 qid:1 1:1\n0 qid:1 1:x\n")
    with pytest.raises(SmoothrankError, match=r"bad\.txt:2: the feature value"):
        load_letor([files[0], tmp_path / "bad.txt"], cache=True)


def test_parquet_and_arrow_tables(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.feather as feather
    import pyarrow.parquet as pq

    from smoothrank.data import load_table

    data = make_synthetic(30, (2, 9), 5, seed=3)
    columns = {"relevance": data.labels.astype(np.int64), "query": data.query_ids,
               **{f"f{j}": data.features[:, j] for j in range(5)}, "note": ["x"] * data.labels.shape[0]}
    table = pa.table(columns)
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=37)  # queries across row groups
    feather.write_feather(table, tmp_path / "t.arrow")
    expected = data.to_dataset()
    for name in ("t.parquet", "t.arrow"):
        for cache in (False, True, True):
            ds = load_table(tmp_path / name, label="relevance", qid="query", cache=cache)
            np.testing.assert_array_equal(ds.features, expected.features)
            np.testing.assert_array_equal(ds.labels, expected.labels)
            np.testing.assert_array_equal(ds.offsets, expected.offsets)
            assert ds.qids.tolist() == expected.qids.tolist() and ds.index_base is None
            assert isinstance(ds.features, np.memmap) == cache
    picked = load_table(tmp_path / "t.parquet", label="relevance", qid="query", features=["f3", "f1"])
    np.testing.assert_array_equal(picked.features, expected.features[:, [3, 1]])
    with pytest.raises(SmoothrankError, match=r"t\.parquet: no column 'label' \(label=\)"):
        load_table(tmp_path / "t.parquet", qid="query")
    bad = table.set_column(0, "relevance", pa.array([0.5] + [1] * (len(table) - 1)))
    pq.write_table(bad, tmp_path / "bad.parquet")
    with pytest.raises(SmoothrankError, match=r"bad\.parquet: row 1: label \('relevance'\) 0\.5 is not an"):
        load_table(tmp_path / "bad.parquet", label="relevance", qid="query")
    with pytest.raises(SmoothrankError, match=r"column 'note' holds string, not numbers"):
        load_table(tmp_path / "t.parquet", label="relevance", qid="query", features=["f0", "note"])


def test_transforms_of_a_store_are_file_backed_and_equal_in_memory_ones(synthetic):
    from smoothrank.data.transforms import Compose, QueryMinMax, SignedLog1p, Standardize

    memory, mapped = load_letor(synthetic, cache=False), load_letor(synthetic, cache=True)
    for steps in ([SignedLog1p(), Standardize()], [QueryMinMax(), SignedLog1p(features=[0, 3])]):
        expected = Compose(steps).fit(memory).transform(memory)
        out = Compose(steps).fit(mapped).transform(mapped)
        assert isinstance(out.features, np.memmap)  # every step: no in-memory copy of the split
        np.testing.assert_array_equal(out.features, expected.features)


def test_train_predict_and_evaluate_share_one_entry(tmp_path, monkeypatch):
    from smoothrank.cli import main
    from smoothrank.data import transforms

    output = transforms._output

    def no_copy(features):  # (load_model checks the saved transforms on a probe row)
        assert features.shape[0] <= 1, "a transformed copy of the features"
        return output(features)

    monkeypatch.setattr(transforms, "_output", no_copy)  # transforms are applied to each batch's rows

    data = write_synthetic_letor(tmp_path / "big.txt", 20, (80, 100), 100, seed=5)
    assert data.stat().st_size >= letor.AUTO_CACHE_BYTES  # cached without asking
    config = tmp_path / "c.yaml"
    config.write_text(f"seed: 0\ndata: {{train: {data}}}\nmodel: {{kind: mlp, hidden: [4]}}\n"
                      "loss: {name: list_net}\ntransforms: [signed_log1p, standardize]\n"
                      f"training: {{epochs: 1}}\noutput: {{run_dir: {tmp_path / 'run'}}}\n")
    assert main(["train", str(config), "--quiet"]) == 0
    model, out = str(tmp_path / "run" / "model.pt"), str(tmp_path / "p.txt")
    assert main(["predict", model, str(data), "--out", out]) == 0
    assert main(["evaluate", "--data", str(data), "--predictions", str(tmp_path / "p.txt"),
                 "--metrics", "ndcg@10"]) == 0
    assert [e.source for e in store.entries()] == [os.path.realpath(data)]
    assert not [p for p in store.cache_dir().iterdir() if p.name.startswith(".tmp-")]
