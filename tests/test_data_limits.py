"""Adversarial but realistic inputs to the data layer: sizes, odd syntax, damaged side files, writers."""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import mmap
import re
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest

from smoothrank.data import (
    Dataset,
    letor,
    load_letor,
    parse_letor,
    read_predictions,
    write_letor,
    write_qrels,
    write_trec_run,
)
from smoothrank.data import store as data_store
from smoothrank.errors import DataFormatError, SmoothrankError


@pytest.fixture(autouse=True)
def _tmp_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SMOOTHRANK_CACHE", str(tmp_path / "cache"))


def _write(tmp_path: Path, data: bytes | str, name: str = "data.txt") -> Path:
    path = tmp_path / name
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


# ----------------------------------------------------------------------------- width and memory
@pytest.mark.parametrize("fast", [False, True])
def test_a_stray_huge_feature_index_is_refused_without_n_features(tmp_path, monkeypatch, fast):
    """One ``1000000000:1`` used to allocate a dense n_docs x 1e9 float32 matrix (8 GB for 2 lines)."""
    if fast:
        monkeypatch.setattr(letor, "FAST_MIN_BYTES", 0)
    path = _write(tmp_path, "1 qid:1 1:1 2:3\n0 qid:1 1:2 1000000000:1\n")
    with pytest.raises(DataFormatError, match=rf"^{re.escape(str(path))}:2: .*1000000000:1.* n_features="):
        load_letor(path, cache=False)
    wide = _write(tmp_path, f"1 qid:1 1:1 {letor.MAX_INFERRED_FEATURES}:2\n", name="wide.txt")
    assert load_letor(wide, cache=False).n_features == letor.MAX_INFERRED_FEATURES  # the limit itself is fine
    hashed = _write(tmp_path, "1 qid:1 1:1 70000:2\n", name="hashed.txt")
    ds = load_letor(hashed, n_features=70000, cache=False)  # an explicit width is a confirmation
    assert ds.features.shape == (1, 70000) and ds.features[0, 69999] == 2


def test_a_stray_huge_index_in_a_large_file_names_its_line(tmp_path):
    lines = [f"{i % 3} qid:{i // 10} 1:{i} 2:0.5" for i in range(10000)]
    lines[5000] += " 1000000000:1"
    path = _write(tmp_path, "\n".join(lines) + "\n", name="big.txt")
    assert path.stat().st_size >= letor.FAST_MIN_BYTES  # the compiled scanner's path
    with pytest.raises(DataFormatError, match=r"big\.txt:5001: feature index in '1000000000:1' is above"):
        load_letor(path, cache=False)


def test_features_too_large_for_memory_are_a_clear_error(tmp_path):
    """40000 rows x (2**31 - 2) float32 columns (~300 TiB) cannot be allocated: no bare MemoryError."""
    path = _write(tmp_path, "0 qid:1 1:1\n" * 40000)
    with pytest.raises(SmoothrankError, match=rf"^{re.escape(str(path))}: not enough memory"):
        load_letor(path, n_features=2**31 - 2, cache=False)
    with pytest.raises(SmoothrankError, match=r"^mem: not enough memory"):
        parse_letor(b"0 qid:1 1:1\n" * 40000, source="mem", n_features=2**31 - 2)


# ----------------------------------------------------------------------------- line ends
def test_a_lone_carriage_return_ends_a_line_in_files_as_in_memory(tmp_path):
    """Classic Mac line ends: ``parse_letor`` read them, ``load_letor`` (readlines) did not."""
    data = b"1 qid:1 1:1\r0 qid:1 1:2\r2 qid:2 1:3 #docid = D\r"
    ds = load_letor(_write(tmp_path, data), cache=False)
    expected = parse_letor(data)
    np.testing.assert_array_equal(ds.features, expected.features)
    np.testing.assert_array_equal(ds.line_numbers, [1, 2, 3])
    assert ds.doc_ids.tolist() == ["1", "2", "D"] and ds.qids.tolist() == ["1", "2"]
    mixed = _write(tmp_path, b"1 qid:1 1:1\n0 qid:1 1:2\r1 qid:1 1:3\r\n2 qid:1 x\n", name="mixed.txt")
    with pytest.raises(DataFormatError, match=r"mixed\.txt:4: "):  # the line parse_letor names too
        load_letor(mixed, cache=False)


# ----------------------------------------------------------------------------- side files and arguments
def test_query_file_damage_is_a_clear_error(tmp_path):
    data = _write(tmp_path, "1 1:1\n0 1:2\n2 1:3\n", name="r.txt")
    side = _write(tmp_path, "99999999999999999999999\n", name="r.txt.query")
    with pytest.raises(DataFormatError, match=r"r\.txt\.query:1: a group size must be a positive integer"):
        load_letor(data, cache=False)  # was a bare OverflowError
    side.write_bytes(gzip.compress(b"2\n1\n"))  # gzip like the data file
    assert load_letor(data, cache=False).offsets.tolist() == [0, 2, 3]
    with pytest.raises(SmoothrankError, match=r"query_file: .* is not a file"):
        load_letor(data, query_file=tmp_path, cache=False)


@pytest.mark.parametrize("sizes", [[0, 3], [4, -1], [1.5, 1.5], [[1, 2]], []])
def test_bad_query_sizes_name_the_argument(sizes):
    with pytest.raises(SmoothrankError, match=r"^query_sizes: expected a non-empty 1-D sequence"):
        parse_letor(b"1 1:1\n0 1:2\n2 1:3\n", query_sizes=sizes)


# ----------------------------------------------------------------------------- cache
def test_damaged_cache_entries_are_parsed_again_without_leaks(tmp_path):
    path = _write(tmp_path, "".join(f"{i % 3} qid:{i // 10} 1:{i}\n" for i in range(50)))
    load_letor(path, cache=True)
    reference = load_letor(path, cache=False)  # not a map of the file damaged below
    (info,) = data_store.entries()
    entry = info.path / "features.npy"
    whole = entry.read_bytes()
    entry.write_bytes(whole[: len(whole) // 2])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # np.load left the truncated entry's file open (ResourceWarning)
        np.testing.assert_array_equal(load_letor(path, cache=True).features, reference.features)
    # a readable entry with the wrong dtypes (not a Dataset) is damaged too, not a crash
    (info,) = data_store.entries()
    np.save(info.path / "features.npy", np.zeros((50, 1)))
    np.testing.assert_array_equal(load_letor(path, cache=True).features, reference.features)
    # offsets that do not cover the documents: inconsistent, parsed again
    (info,) = data_store.entries()
    np.save(info.path / "offsets.npy", np.array([0, 10], dtype=np.int64))
    manifest = json.loads((info.path / "manifest.json").read_text())
    manifest["arrays"]["offsets"]["shape"] = [2]
    (info.path / "manifest.json").write_text(json.dumps(manifest))
    np.testing.assert_array_equal(load_letor(path, cache=True).labels, reference.labels)
    np.testing.assert_array_equal(load_letor(path, cache=True).offsets, reference.offsets)  # rewritten


# ----------------------------------------------------------------------------- predictions
@pytest.mark.parametrize("text", ["1_0", "0x10", " 2_5e1"])
def test_prediction_scores_are_decimal_numbers_only(tmp_path, text):
    """``float()`` read ``1_0`` as 10.0; the Perl LETOR scripts read it as 1."""
    path = _write(tmp_path, f"1.5\n{text}\n", name="p.txt")
    with pytest.raises(DataFormatError, match=rf"p\.txt:2: the score is not a number: '{text.strip()}'"):
        read_predictions(path)


def test_prediction_scores_keep_every_decimal_form_and_short_messages(tmp_path):
    path = _write(tmp_path, "1\n-2.5\n.5\n5.\n+1e-3\n-0\r\n 7E2 \n", name="p.txt")
    assert read_predictions(path).tolist() == [1.0, -2.5, 0.5, 5.0, 0.001, -0.0, 700.0]
    _write(tmp_path, "1" * 400 + "\n", name="p.txt")
    with pytest.raises(DataFormatError, match=r"not finite: '1{40}'$"):  # cut like the other message
        read_predictions(path)


# ----------------------------------------------------------------------------- writers
def _with_duplicate_docid() -> Dataset:
    return parse_letor(b"1 qid:1 1:1 #docid = A\n0 qid:1 1:2 #docid = B\n2 qid:1 1:3 #docid = A\n"
                       b"1 qid:2 1:1 #docid = A\n", source="dup.txt")


def test_trec_files_refuse_a_docid_repeated_within_a_query(tmp_path):
    ds = _with_duplicate_docid()
    message = r"^dup\.txt: docid 'A' appears more than once in qid '1' \(lines 1 and 3\)"
    with pytest.raises(SmoothrankError, match=message):
        write_trec_run(tmp_path / "run.txt", ds, [1.0, 2.0, 3.0, 4.0])
    with pytest.raises(SmoothrankError, match=message):
        write_qrels(tmp_path / "qrels.txt", ds)
    assert not list(tmp_path.iterdir())  # nothing written, not even a temporary file
    ok = ds.subset([1])  # the same docid in another query is fine
    write_trec_run(tmp_path / "run.txt", ok, [1.0])
    assert (tmp_path / "run.txt").read_text() == "2 Q0 A 1 1.0 smoothrank\n"


@pytest.mark.parametrize("fast", [False, True])
def test_the_largest_float32_reads_back_and_only_overflow_is_refused(tmp_path, monkeypatch, fast):
    # A review found the largest float32 refused as out of range: its shortest text (3.4028235e+38)
    # and write_letor's 9 digits are above it as doubles but round to it.
    if fast:
        monkeypatch.setattr(letor, "FAST_MIN_BYTES", 0)
    top = np.finfo(np.float32).max
    data = Dataset.from_arrays(np.array([[top], [-top], [1.5]], np.float32), np.array([1.0, 0.0, 0.0]),
                               ["a", "a", "a"])
    write_letor(tmp_path / "max.txt", data)
    back = load_letor(tmp_path / "max.txt", cache=False)
    np.testing.assert_array_equal(back.features, data.features)
    shortest = _write(tmp_path, "1 qid:1 1:3.4028235e+38\n0 qid:1 1:-3.4028235e38\n", name="short.txt")
    np.testing.assert_array_equal(load_letor(shortest, cache=False).features[:, 0], [top, -top])
    for text in ("3.4028236e38", "3.5e38", "1e39"):  # round to inf in float32
        path = _write(tmp_path, f"1 qid:1 1:{text}\n", name="over.txt")
        with pytest.raises(DataFormatError, match=r"over\.txt:1: feature value out of the float32 range"):
            load_letor(path, cache=False)
        labelled = _write(tmp_path, f"{text} qid:1 1:1\n", name="label.txt")
        with pytest.raises(DataFormatError, match=r"label\.txt:1: the label .* overflows float32"):
            load_letor(labelled, cache=False, allow_real_labels=True)


def test_write_predictions_refuses_rows_of_several_files(tmp_path):
    # concat_datasets keeps each part's line numbers: ordering by them interleaved the two files.
    from smoothrank.data import concat_datasets, write_predictions

    a = Dataset.from_arrays(np.zeros((2, 1)), np.array([0, 1.0]), ["a", "a"])
    b = Dataset.from_arrays(np.zeros((2, 1)), np.array([0, 1.0]), ["b", "b"])
    with pytest.raises(SmoothrankError, match=r"^dataset: .* repeats line numbers \(rows of several files\)"):
        write_predictions(tmp_path / "p.txt", np.array([1.0, 2.0, 3.0, 4.0]), dataset=concat_datasets([a, b]))
    assert not (tmp_path / "p.txt").exists()
    write_predictions(tmp_path / "p.txt", np.array([1.0, 2.0, 3.0, 4.0]))  # row order
    assert (tmp_path / "p.txt").read_text().split() == ["1.0", "2.0", "3.0", "4.0"]


def test_write_letor_refuses_what_it_could_not_read_back(tmp_path):
    nan = Dataset(np.array([[1.0], [2.0]], np.float32), np.zeros(2, np.float32), np.array(["q"]),
                  np.array(["a", "b"]), np.array([0, 2]), np.array([1, 2]), "mem")
    nan.features[1, 0] = np.nan  # a Dataset refuses NaN when made, not when written to in place
    with pytest.raises(SmoothrankError, match=r"row 1 \(line 2\) has a non-finite feature value"):
        write_letor(tmp_path / "nan.txt", nan)
    hashed = Dataset.from_arrays(np.ones((2, 2), np.float32), np.zeros(2), ["q#1", "q#1"])
    with pytest.raises(SmoothrankError, match="qid 'q#1' contains '#'"):  # '#...' would read as a comment
        write_letor(tmp_path / "hash.txt", hashed)
    colon = Dataset.from_arrays(np.ones((1, 1), np.float32), np.zeros(1), ["q:1"])
    with pytest.raises(SmoothrankError, match="qid 'q:1' contains ':', which the LETOR reader refuses"):
        write_letor(tmp_path / "colon.txt", colon)
    spaced = Dataset.from_arrays(np.ones((1, 1), np.float32), np.zeros(1), ["q 1"])
    with pytest.raises(SmoothrankError, match="qid 'q 1' is empty or contains whitespace; the file could"):
        write_letor(tmp_path / "space.txt", spaced)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("scores", [["a", "b"], [None, 1.0], np.array([1 + 1j, 2])])
def test_scores_that_are_not_numbers_name_the_argument(tmp_path, scores):
    ds = Dataset.from_arrays(np.ones((2, 1), np.float32), np.zeros(2), [1, 1])
    with pytest.raises(SmoothrankError, match=r"^scores: expected numbers"):
        write_trec_run(tmp_path / "run.txt", ds, scores)


def test_from_arrays_refuses_nan_inf_and_float32_overflow():
    with pytest.raises(SmoothrankError, match=r"features\[1, 0\] is nan"):
        Dataset.from_arrays(np.array([[1.0], [np.nan]]), np.zeros(2), [1, 1])
    with pytest.raises(SmoothrankError, match=r"labels\[0\] is inf"):
        Dataset.from_arrays(np.ones((2, 1)), np.array([np.inf, 0]), [1, 1])
    with pytest.raises(SmoothrankError, match=r"features\[0, 1\] is 1e\+300"):  # inf after the cast
        Dataset.from_arrays(np.array([[1.0, 1e300]]), np.zeros(1), [1])
    # An integer label float32 cannot hold exactly would change silently in the cast.
    with pytest.raises(SmoothrankError, match=r"labels\[1\] is 16777217, beyond 2\^24"):
        Dataset.from_arrays(np.ones((2, 1)), np.array([0, 2**24 + 1]), [1, 1])
    assert Dataset.from_arrays(np.ones((2, 1)), np.array([0, 2**24]), [1, 1]).labels[1] == 2**24
    # As an integer-valued float64 too (an audit of 2026-11-25: 16777217.0 became 16777216 silently);
    # real-valued labels round as reals do, and a float32 array holds what it holds.
    with pytest.raises(SmoothrankError, match=r"labels\[1\] is 16777217, beyond 2\^24"):
        Dataset.from_arrays(np.ones((2, 1)), np.array([0.0, 2.0**24 + 1]), [1, 1])
    assert Dataset.from_arrays(np.ones((2, 1)), np.array([0.0, 2.0**24 + 0.5]), [1, 1]).labels[1] == 2**24
    assert Dataset.from_arrays(np.ones((2, 1)), np.array([0, 3e7], np.float32), [1, 1]).labels[1] == 3e7
    # An int and a float of one value are treated alike (2^25 float32 holds exactly; a review), and
    # float16 labels are compared without a cast of 2^24 to float16 (it warned of an overflow).
    for labels in (np.array([0, 2**25]), np.array([0.0, 2.0**25])):
        assert Dataset.from_arrays(np.ones((2, 1)), labels, [1, 1]).labels[1] == 2**25
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert Dataset.from_arrays(np.ones((2, 1)), np.array([1.5, 2], np.float16), [1, 1]).labels[0] == 1.5
    # (a review) a non-integer longdouble label is a real one; an int above 2^53 is compared exactly
    real = np.array([0, 2**24 + 1.5], np.longdouble)
    assert Dataset.from_arrays(np.ones((2, 1)), real, [1, 1]).labels[1] == np.float32(2**24 + 2)
    with pytest.raises(SmoothrankError, match=r"labels\[1\] is 9007199254740993, beyond 2\^24"):
        Dataset.from_arrays(np.ones((2, 1)), np.array([0, 2**53 + 1]), [1, 1])


def test_non_finite_features_are_refused_wherever_a_dataset_is_made(tmp_path):
    # A review found np.log(features) (-inf for a 0) accepted by with_features and the constructor;
    # QueryMinMax then turned every value into NaN and training batches carried NaN, silently.
    path = _write(tmp_path, "1 qid:1 1:2 2:1\n0 qid:1 1:0 2:3\n", name="train.txt")
    ds = load_letor(path, cache=False)
    with pytest.raises(SmoothrankError, match=r"^with_features: new_features: .*train\.txt:2: column 0 "
                                              r"\(row 1\) is -inf; features must be finite"):
        with np.errstate(divide="ignore"):
            ds.with_features(np.log(ds.features))
    with pytest.raises(SmoothrankError, match=r"train\.txt:1: column 1 \(row 0\) is inf"):  # beyond float32
        ds.with_features(np.array([[1.0, 1e39], [1.0, 1.0]]))
    with pytest.raises(SmoothrankError, match=r"^Dataset: features: <memory>:7: column 0 \(row 1\) is nan"):
        Dataset(np.array([[1.0], [np.nan]], np.float32), np.zeros(2, np.float32), np.array(["q"]),
                np.array(["a", "b"]), np.array([0, 2]), np.array([3, 7]))
    assert ds.with_features(np.log1p(ds.features)).n_features == 2
    assert Dataset.from_arrays(np.zeros((1, 0)), np.zeros(1), [1]).n_features == 0  # nothing to check
    # NULL values are still read as null_value, which must itself be finite
    nulls = _write(tmp_path, "1 qid:1 1:NULL 2:1\n", name="nulls.txt")
    assert load_letor(nulls, null_value=-1.0, cache=False).features.tolist() == [[-1.0, 1.0]]


def test_transforms_refuse_non_finite_input_by_line_and_column():
    from smoothrank.data.transforms import QueryMinMax, SignedLog1p, Standardize

    ds = Dataset.from_arrays(np.array([[1.0, 2.0], [3.0, 2.0], [5.0, 1.0]]), np.zeros(3), [1, 1, 2])
    train = Standardize().fit(ds)
    ds.features[1, 0] = -np.inf  # the arrays of a frozen Dataset can still be written in place
    cases = [(QueryMinMax().fit_transform, "QueryMinMax"), (Standardize().fit, "Standardize.fit"),
             (train.transform, "Standardize"), (SignedLog1p().transform, "SignedLog1p")]
    for transform, name in cases:
        with pytest.raises(SmoothrankError, match=rf"^{name}: <arrays>:2: column 0 \(row 1\) is -inf"):
            transform(ds)


def test_subset_refuses_non_integer_indices_and_reads_a_boolean_mask():
    # A review found subset([0.7]) returning query 0: the float was truncated.
    ds = Dataset.from_arrays(np.arange(5, dtype=np.float32)[:, None], np.zeros(5), ["a", "a", "b", "c", "c"])
    for queries, shown in [([0.7], "float64 (e.g. 0.7)"), (np.array([1.0, 2.0]), "float64 (e.g. 1.0)"),
                           (["1"], "<U1 (e.g. '1')")]:
        with pytest.raises(SmoothrankError, match=rf"^subset: queries: expected integer query indices or a "
                                                  rf"boolean mask, got {re.escape(shown)}$"):
            ds.subset(queries)
    assert ds.subset([2, -3]).qids.tolist() == ["c", "a"]
    assert ds.subset(np.array([2, 0], dtype=np.uint8)).qids.tolist() == ["c", "a"]
    mask = ds.subset(np.array([True, False, True]))
    assert mask.qids.tolist() == ["a", "c"] and mask.features[:, 0].tolist() == [0, 1, 3, 4]
    assert ds.subset([False, True, False]).qids.tolist() == ["b"]
    with pytest.raises(SmoothrankError, match=r"^subset: queries: a boolean mask needs one entry per query "
                                              r"\(3\), got shape \(2,\)$"):
        ds.subset([True, False])
    with pytest.raises(SmoothrankError, match=r"selects no query"):
        ds.subset([False, False, False])
    with pytest.raises(SmoothrankError, match=r"^subset: queries is empty$"):
        ds.subset([])


# ----------------------------------------------------------------------------- transforms
@pytest.mark.parametrize("change", [{"mean": [float("nan"), 0.0]}, {"std": [1.0, 0.0]}, {"std": [1.0]},
                                    {"mean": None}])
def test_a_damaged_standardize_state_is_refused_not_nan_features(change):
    from smoothrank.data.transforms import Standardize, transform_from_state

    ds = Dataset.from_arrays(np.array([[1.0, 2.0], [3.0, 2.0]]), np.zeros(2), [1, 1])
    state = {**Standardize().fit(ds).state_dict(), **change}
    with pytest.raises(SmoothrankError, match=r"^transform_from_state: Standardize needs"):
        transform_from_state(state).transform(ds)


def test_standardised_values_beyond_float32_name_the_file_line_and_column(tmp_path):
    # A review found legal features near 1e38 standardised to inf with only numpy's overflow
    # warning, and the NaN error that followed named nothing.
    from smoothrank.data.transforms import Standardize

    train = Dataset.from_arrays(np.array([[0.0, 1.0], [1.0, 2.0]]), np.zeros(2), [1, 1])
    path = _write(tmp_path, "1 qid:1 1:0.5 2:1\n0 qid:1 1:3e38 2:1\n", name="valid.txt")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy overflow warning either
        with pytest.raises(SmoothrankError, match=r"valid\.txt:2: column 0 \(3e\+38\) standardises to "
                                                  r"6e\+38, beyond float32 \(training mean 0\.5, std 0\.5\)"):
            Standardize().fit(train).transform(load_letor(path, cache=False))


def test_parse_letor_reads_buffers_and_refuses_text_naming_the_argument(tmp_path):
    # A review found bytearray (unhashable qids), memoryview and mmap failing deep inside the parser.
    text = b"2 qid:a 1:1 2:3\n0 qid:a 1:2\n1 qid:b 2:5 #docid = d3\n"
    rows = 4000  # large inputs go through the compiled scanner
    large = b"".join(f"{i % 3} qid:{i // 4} 1:{i} 2:0.5\n".encode() for i in range(rows))
    assert len(large) >= letor.FAST_MIN_BYTES
    path = _write(tmp_path, text)
    for data in (text, large):
        expected = parse_letor(data)
        with open(_write(tmp_path, data, "mapped.txt"), "rb") as handle, \
                mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            for buffer in (bytearray(data), memoryview(data), mapped):
                got = parse_letor(buffer)
                np.testing.assert_array_equal(got.features, expected.features)
                assert got.qids.tolist() == expected.qids.tolist()
                assert got.doc_ids.tolist() == expected.doc_ids.tolist()
    with pytest.raises(SmoothrankError, match=r"^data: expected bytes, got str; encode the text, e\.g\. "
                                              r"text\.encode\(\)$"):
        parse_letor(text.decode())
    with pytest.raises(SmoothrankError, match=r"^data: expected bytes .*, got \w*Path$"):
        parse_letor(path)


# ----------------------------------------------------------------------------- other formats
_TEXT = b"1 qid:1 1:1\n0 qid:1 1:2\n"


def _zipped(data: bytes) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("data.txt", data)
    return out.getvalue()


_OTHER_FORMATS = {
    "bz2": (bz2.compress(_TEXT), "bz2-compressed; only plain and gzip files are read: decompress it first"),
    "bz2_empty": (bz2.compress(b""), "bz2-compressed"),
    "xz": (lzma.compress(_TEXT), "xz-compressed; only plain and gzip files are read"),
    "zip": (_zipped(_TEXT), "zip-compressed; only plain and gzip files are read"),
    "zstd": (bytes.fromhex("28b52ffd2019c90000") + _TEXT, "zstd-compressed; only plain and gzip files"),
    "utf16le": (_TEXT.decode().encode("utf-16"), "UTF-16 text; convert it to UTF-8/ASCII"),
    "utf16be": (b"\xfe\xff" + _TEXT.decode().encode("utf-16-be"), "UTF-16 text; convert it to UTF-8/ASCII"),
    # without a byte order mark (it read as "the label '1\x00' is not a number")
    "utf16le_nobom": (_TEXT.decode().encode("utf-16-le"), "UTF-16 text; convert it to UTF-8/ASCII"),
    "utf16be_nobom": (_TEXT.decode().encode("utf-16-be"), "UTF-16 text; convert it to UTF-8/ASCII"),
}


@pytest.mark.parametrize("kind", sorted(_OTHER_FORMATS))
def test_compressed_and_utf16_inputs_are_named_not_read_as_a_bad_label(tmp_path, kind):
    # A review found "f.txt.bz2:1: the label 'BZh91AY&SY...' is not a number".
    data, message = _OTHER_FORMATS[kind]
    path = _write(tmp_path, data, f"data.{kind}")
    with pytest.raises(DataFormatError, match=rf"^{re.escape(f'{path}: {message}')}"):
        load_letor(path, cache=False)
    with pytest.raises(DataFormatError, match=rf"^<bytes>: {message.split(';')[0]}"):
        parse_letor(data)
    with pytest.raises(DataFormatError, match=rf"^{re.escape(str(path))}: "):
        read_predictions(path)
    labels = _write(tmp_path, "1 1:1\n0 1:2\n", "lgb.txt")
    with pytest.raises(DataFormatError, match=rf"^{re.escape(str(path))}: "):
        load_letor(labels, query_file=path, cache=False)


def test_short_plain_files_are_not_taken_for_utf16(tmp_path):
    # BOM-less UTF-16 is told by a zero byte at every other position: an empty file or one byte has
    # none to show and is read as text (and refused for what it is).
    with pytest.raises(DataFormatError, match="no data lines"):
        load_letor(_write(tmp_path, b"", "empty.txt"), cache=False)
    with pytest.raises(DataFormatError, match=r"one\.txt:1: .*qid"):
        load_letor(_write(tmp_path, b"1", "one.txt"), cache=False)
    nobom = _write(tmp_path, gzip.compress(_TEXT.decode().encode("utf-16-le")), "u16le.txt.gz")
    with pytest.raises(DataFormatError, match=r"u16le\.txt\.gz \(decompressed\): UTF-16 text"):
        load_letor(nobom, cache=False)


def test_the_same_formats_inside_gzip_and_text_that_only_looks_alike(tmp_path):
    utf16 = _write(tmp_path, gzip.compress(_OTHER_FORMATS["utf16le"][0]), "u16.txt.gz")
    with pytest.raises(DataFormatError, match=r"u16\.txt\.gz \(decompressed\): UTF-16 text"):
        load_letor(utf16, cache=False)
    twice = _write(tmp_path, gzip.compress(gzip.compress(_TEXT)), "twice.txt.gz")
    with pytest.raises(DataFormatError, match=r"twice\.txt\.gz \(decompressed\): gzip-compressed"):
        load_letor(twice, cache=False)
    with pytest.raises(DataFormatError, match=r"^<bytes>: gzip-compressed; parse_letor reads plain text"):
        parse_letor(gzip.compress(_TEXT))
    # "BZh" alone is not bz2: such a file is still a bad label, named by its line
    with pytest.raises(DataFormatError, match=r"bzh\.txt:1: the label 'BZh9' is not a number"):
        load_letor(_write(tmp_path, b"BZh9 qid:1 1:1\n", "bzh.txt"), cache=False)


# ----------------------------------------------------------------------------- byte order marks
_BOM = b"\xef\xbb\xbf"


@pytest.mark.parametrize("size", ["small", "large", "gzip"])
def test_a_byte_order_mark_is_skipped_by_every_reader(tmp_path, size):
    # Windows tools start "UTF-8" files with a BOM; it used to join the first label ('\ufeff2').
    rows = 4000 if size == "large" else 2  # large: beyond FAST_MIN_BYTES, the compiled scanner
    text = "".join(f"{(i % 3)} qid:{i // 2} 1:{i / 7:.4f} 2:0.5\n" for i in range(rows)).encode()
    assert (len(text) >= letor.FAST_MIN_BYTES) == (size == "large")
    plain = parse_letor(text)
    name = "data.txt.gz" if size == "gzip" else "data.txt"
    path = _write(tmp_path, gzip.compress(_BOM + text) if size == "gzip" else _BOM + text, name)
    for dataset in (load_letor(path, cache=False), parse_letor(_BOM + text)):
        np.testing.assert_array_equal(dataset.labels, plain.labels)
        np.testing.assert_array_equal(dataset.features, plain.features)
        assert list(dataset.qids) == list(plain.qids)
        assert list(dataset.line_numbers) == list(plain.line_numbers)
    preds = _write(tmp_path, _BOM + b"0.5\n-1\n", "pred.txt")
    assert read_predictions(preds).tolist() == [0.5, -1.0]


def test_a_byte_order_mark_in_a_query_file_and_a_bom_mid_file(tmp_path):
    data = _write(tmp_path, "2 1:1\n0 1:2\n1 1:3\n", "train.txt")
    _write(tmp_path, _BOM + b"2\n1\n", "train.txt.query")
    assert load_letor(data, cache=False).offsets.tolist() == [0, 2, 3]
    # Inside a file (two files concatenated) it is not a byte order mark but a bad label: named.
    joined = _write(tmp_path, b"1 qid:1 1:1\n" + _BOM + b"0 qid:1 1:2\n", "joined.txt")
    with pytest.raises(DataFormatError, match=r"joined\.txt:2: "):
        load_letor(joined, cache=False)


def test_writers_refuse_a_qid_that_names_two_query_lists(tmp_path):
    # An audit found a subset repeating a query (a bootstrap sample) written by write_letor as one
    # qid's 2n lines, read back as ONE list, and TREC files with every (qid, docid) twice, although
    # the TREC writers refuse a docid repeated within a query; concat_datasets of files numbered
    # "0", "1", ... by .query side files gives the same.
    from smoothrank.data import concat_datasets

    ds = Dataset.from_arrays(np.arange(6, dtype=np.float32).reshape(3, 2), np.array([1.0, 0.0, 2.0]),
                             ["a", "a", "b"], doc_ids=["x", "y", "z"], source="f.txt")
    message = r"^f\.txt: qid 'a' names two query lists \(queries 0 and 1, from lines 1 and 1\)"
    boot = ds.subset([0, 0])
    with pytest.raises(SmoothrankError, match=message):
        write_letor(tmp_path / "boot.txt", boot)
    with pytest.raises(SmoothrankError, match=message):
        write_trec_run(tmp_path / "boot.run", boot, np.arange(4.0))
    with pytest.raises(SmoothrankError, match=message):
        write_qrels(tmp_path / "boot.qrels", boot)
    both = concat_datasets([ds, ds.subset([1])], source="f.txt")  # 'b' twice, not adjacent to each other
    with pytest.raises(SmoothrankError, match=r"qid 'b' names two query lists \(queries 1 and 2"):
        write_letor(tmp_path / "both.txt", both)
    assert not list(tmp_path.iterdir())  # nothing written, not even a temporary file
    write_letor(tmp_path / "ok.txt", ds.subset([1, 0]))  # distinct qids in any order are fine
    assert load_letor(tmp_path / "ok.txt", cache=False).list_sizes.tolist() == [1, 2]


def test_parse_letor_reads_input_for_the_strict_parser_in_chunks(monkeypatch):
    # An audit found parse_letor handing the strict parser all of its input's lines at once (one
    # Python bytes object per line and per token: 1.2 GB for 58 MB of MSLR text), where load_letor
    # reads a file 16 MiB at a time as docs/data.md says.
    seen = []
    real = letor._parse_lines

    def spy(chunks, **context):
        def counted():
            for lines in chunks:
                seen.append(len(lines))
                yield lines
        return real(counted(), **context)

    monkeypatch.setattr(letor, "_parse_lines", spy)
    monkeypatch.setattr(letor, "_CHUNK_BYTES", 64)
    text = b"".join(b"%d qid:%d 2:%d 1:0.5\n" % (i % 3, i // 4, i) for i in range(40))  # unsorted: strict
    ds = parse_letor(text)
    assert len(seen) > 5 and max(seen) < 10 and sum(seen) == 40
    assert ds.n_docs == 40 and ds.n_queries == 10
    np.testing.assert_array_equal(ds.features[:, 1], np.arange(40, dtype=np.float32))
    np.testing.assert_array_equal(ds.line_numbers, np.arange(1, 41))
    with pytest.raises(DataFormatError, match=r"^<bytes>:38: non-finite feature value in '1:nan'"):
        parse_letor(text.replace(b"2:37 1:0.5", b"2:37 1:nan"))
