"""The bundled MQ2008: folds assembled byte-identically, checksums, user paths win."""

from __future__ import annotations

import gzip
import hashlib

import numpy as np
import pytest

import smoothrank.datasets as datasets
from smoothrank.data import load_letor
from smoothrank.datasets import MQ2008_FOLDS, load_mq2008, mq2008_text
from smoothrank.errors import DataFormatError, SmoothrankError


@pytest.fixture(autouse=True)
def _tmp_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SMOOTHRANK_CACHE", str(tmp_path / "cache"))


@pytest.mark.parametrize("fold", [1, 2, 3, 4, 5])
def test_folds_byte_identical_to_official(shared_dir, fold):
    for split in ("train", "vali", "test"):
        official = gzip.decompress((shared_dir / f"data/MQ2008/Fold{fold}/{split}.txt.gz").read_bytes())
        assert mq2008_text(fold, split) == official, (fold, split)


def test_bundle_is_small_and_partitions_used_once():
    folder = datasets.resources.files("smoothrank.datasets").joinpath("data", "MQ2008")
    total = sum(folder.joinpath(f"S{i}.txt.gz").read_bytes().__len__() for i in range(1, 6))
    assert total < 3_000_000
    assert sorted(MQ2008_FOLDS[k]["test"][0] for k in MQ2008_FOLDS) == ["S1", "S2", "S3", "S4", "S5"]


def test_load_mq2008_counts_and_cache():
    splits = [load_mq2008(k, "test") for k in range(1, 6)]
    assert sum(d.n_queries for d in splits) == 784 and sum(d.n_docs for d in splits) == 15211
    assert all(d.n_features == 46 for d in splits)
    train = load_mq2008(1)
    cached = load_mq2008(1)  # second load answered from the cache
    np.testing.assert_array_equal(train.features, cached.features)
    np.testing.assert_array_equal(train.doc_ids, cached.doc_ids)
    assert train.n_queries + load_mq2008(1, "vali").n_queries + splits[0].n_queries == 784


def test_a_readable_but_inconsistent_cache_entry_is_parsed_again():
    # An entry whose offsets do not cover the documents: load_letor re-parsed it, load_mq2008 raised
    # "offsets must start at 0..." until the cache was deleted.
    from smoothrank.data import store

    expected = load_mq2008(1, "test")
    (info,) = store.entries()
    np.save(info.path / "offsets.npy", expected.offsets[:-1])
    again = load_mq2008(1, "test")
    np.testing.assert_array_equal(again.offsets, expected.offsets)
    (info,) = store.entries()
    np.testing.assert_array_equal(np.load(info.path / "offsets.npy"), expected.offsets)  # rewritten


def test_damaged_partition_is_detected(monkeypatch):
    monkeypatch.setitem(datasets.MQ2008_SHA256, "S5", hashlib.sha256(b"other").hexdigest())
    with pytest.raises(SmoothrankError, match="S5 is damaged"):
        load_mq2008(1, "test")


def test_user_path_wins(tmp_path):
    fold = tmp_path / "MQ2008" / "Fold2"
    fold.mkdir(parents=True)
    (fold / "test.txt").write_text("2 qid:7 1:0.5 #docid = mine\n")
    ds = load_mq2008(2, "test", path=tmp_path)
    assert ds.doc_ids.tolist() == ["mine"] and ds.source.endswith("test.txt")
    with pytest.raises(FileNotFoundError):
        load_mq2008(3, "test", path=tmp_path)


def test_bad_fold_and_split():
    with pytest.raises(SmoothrankError, match="fold"):
        load_mq2008(6)
    with pytest.raises(SmoothrankError, match="split"):
        load_mq2008(1, "dev")


def test_load_splits_of_a_data_section(tmp_path, monkeypatch):
    # One loader for the trainer and the experiment runner: the bundled fold, or files whose
    # widths follow the training file; a missing file names its field and, if relative, its folder.
    bundled = datasets.load_splits({"mq2008_fold": 2})
    names = (("train", "train"), ("valid", "vali"), ("test", "test"))
    assert {k: v.source for k, v in bundled.items()} == {k: load_mq2008(2, s).source for k, s in names}
    assert bundled["valid"].source != bundled["test"].source
    (tmp_path / "train.txt").write_text("1 qid:1 1:1 4:2\n0 qid:1 2:1\n")
    (tmp_path / "test.txt").write_text("1 qid:7 1:1\n0 qid:7 2:1\n")
    files = datasets.load_splits({"train": str(tmp_path / "train.txt"), "test": str(tmp_path / "test.txt")})
    assert sorted(files) == ["test", "train"] and files["test"].n_features == 4
    wide = datasets.load_splits({"train": str(tmp_path / "train.txt"), "n_features": 6})
    assert wide["train"].n_features == 6
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SmoothrankError, match=rf"^data\.valid: vali\.txt does not exist \(a relative path is "
                                              rf"read from {tmp_path}\)$"):
        datasets.load_splits({"train": "train.txt", "valid": "vali.txt"})
    with pytest.raises(SmoothrankError, match=r"^data\.train: /no/such\.txt does not exist$"):
        datasets.load_splits({"train": "/no/such.txt"})
    with pytest.raises(SmoothrankError, match=r"^data\.valid: .* is a folder, not a LETOR file$"):
        datasets.load_splits({"train": "train.txt", "valid": str(tmp_path)})


def test_every_split_is_read_with_the_training_files_index_base(tmp_path):
    # A review found a zero-based validation file without any "0:" token (sklearn's dump leaves out
    # zeros) read one column to the left of its zero-based training file: silently wrong features.
    (tmp_path / "train.txt").write_text("1 qid:1 0:1 1:5 2:7\n0 qid:1 0:0 1:6 2:8\n")
    (tmp_path / "valid.txt").write_text("1 qid:2 1:5 2:7\n0 qid:2 1:6 2:8\n")
    splits = datasets.load_splits({split: str(tmp_path / f"{split}.txt") for split in ("train", "valid")})
    assert splits["train"].index_base == splits["valid"].index_base == 0
    np.testing.assert_array_equal(splits["valid"].features, [[0, 5, 7], [0, 6, 8]])
    assert load_letor(tmp_path / "valid.txt").index_base == 1  # alone, the file would guess 1-based
    # A one-based training file and a file with index 0: an error naming both, not a guess.
    (tmp_path / "one.txt").write_text("1 qid:1 1:1 2:5\n0 qid:1 2:6\n")
    (tmp_path / "zero.txt").write_text("1 qid:2 0:5 1:7\n")
    with pytest.raises(DataFormatError, match=r"zero\.txt:1: feature index 0 .*data\.valid is read with the "
                                              r"feature indices of data\.train, which start at 1"):
        datasets.load_splits({"train": str(tmp_path / "one.txt"), "valid": str(tmp_path / "zero.txt")})
    assert load_mq2008(1, "test").index_base == 1


@pytest.mark.parametrize(("section", "message"), [
    # A user's file used to be silently passed over for the bundled fold.
    ({"mq2008_fold": 1, "train": "mine.txt"}, "data.mq2008_fold and data.train/valid/test are exclusive"),
    ({"mq2008_fold": 1, "test": "mine.txt"}, "data.mq2008_fold and data.train/valid/test are exclusive"),
    ({"valid": "v.txt"}, "give either data.train (a LETOR file) or data.mq2008_fold"),  # was a KeyError
    ({"train": "t.txt", "vali": "v.txt"}, "data: unknown key(s) ['vali']"),  # was silently ignored
])
def test_load_splits_refuses_what_the_training_config_refuses(section, message):
    from smoothrank.training.config import config_from_dict

    with pytest.raises(SmoothrankError) as info:
        datasets.load_splits(section)
    assert message in str(info.value)
    with pytest.raises(SmoothrankError):
        config_from_dict({"data": section})


def test_only_index_base_errors_of_a_split_mention_the_training_files_index_base(tmp_path):
    # An audit found every error of data.valid/test suffixed "(data.valid is read with the feature
    # indices of data.train, which start at 1)", a NaN or a bad label too, where that is no cause.
    (tmp_path / "train.txt").write_text("1 qid:1 1:1 2:5\n0 qid:1 2:6\n")
    (tmp_path / "nan.txt").write_text("1 qid:2 1:nan 2:7\n")
    with pytest.raises(DataFormatError) as info:
        datasets.load_splits({"train": str(tmp_path / "train.txt"), "valid": str(tmp_path / "nan.txt")})
    assert str(info.value).endswith("nan.txt:1: non-finite feature value in '1:nan'")


# ------------------------------------------------------------------ synthetic data
def test_synthetic_data_is_deterministic_and_reads_back_exactly(tmp_path):
    from smoothrank.datasets import make_synthetic, write_synthetic_letor

    a = make_synthetic(300, (3, 30), 9, seed=7)
    b = make_synthetic(300, (3, 30), 9, seed=7)
    c = make_synthetic(300, (3, 30), 9, seed=8)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not np.array_equal(a.features, c.features)
    sizes = np.bincount(a.query_ids)[1:]
    assert sizes.shape == (300,) and sizes.min() >= 3 and sizes.max() <= 30
    path = write_synthetic_letor(tmp_path / "s.txt", 300, (3, 30), 9, seed=7)
    ds = load_letor(path, cache=False)
    assert ds.n_queries == 300 and ds.index_base == 1
    np.testing.assert_array_equal(ds.features, a.features)
    np.testing.assert_array_equal(ds.labels, a.labels)
    np.testing.assert_array_equal(ds.list_sizes, sizes)


def test_synthetic_labels_follow_the_distribution_and_the_planted_weights():
    from smoothrank.datasets import make_synthetic

    share = [0.6, 0.3, 0.1]
    data = make_synthetic(400, 50, 6, label_levels=3, label_distribution=share, count_fraction=0.0,
                          relevance_weights=[1, -1, 0, 0, 0, 0.5], noise=0.1, seed=1)
    observed = np.bincount(data.labels.astype(int), minlength=3) / data.labels.shape[0]
    np.testing.assert_allclose(observed, share, atol=0.03)
    planted = data.features.astype(np.float64) @ data.weights
    assert np.corrcoef(planted, data.labels)[0, 1] > 0.6
    assert abs(np.corrcoef(data.features[:, 2], data.labels)[0, 1]) < 0.05  # an unweighted column


@pytest.mark.parametrize("kwargs, message", [
    ({"docs_per_query": (5, 2)}, "docs_per_query"),
    ({"label_distribution": [1, 2]}, "label_distribution"),
    ({"relevance_weights": [0, 0, 0]}, "relevance_weights"),
    ({"seed": -1}, "seed"),
])
def test_synthetic_refuses_bad_arguments(kwargs, message):
    from smoothrank.datasets import make_synthetic

    args = {"n_queries": 2, "docs_per_query": 3, "n_features": 3, **kwargs}
    with pytest.raises(SmoothrankError, match=message):
        make_synthetic(**args)
