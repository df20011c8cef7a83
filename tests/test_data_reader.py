"""The LETOR / SVMlight reader: real files, bad input (file:line messages), properties, cache."""

from __future__ import annotations

import gzip
import io
import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.datasets import load_svmlight_file

from smoothrank.data import letor, load_letor, parse_letor, write_letor
from smoothrank.data import store as data_store
from smoothrank.errors import DataFormatError, SmoothrankError


@pytest.fixture(autouse=True)
def _tmp_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SMOOTHRANK_CACHE", str(tmp_path / "cache"))


def _write(tmp_path: Path, text: str, name: str = "data.txt") -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode())
    return path


SHARED_FILES = [
    "MQ2008/Fold1/test.txt.gz",
    "MQ2008/Fold3/vali.txt.gz",
    "MSLR-WEB-Fold1-5k-sample/msn1.fold1.train.5k.txt.gz",
    "MSLR-WEB-Fold1-5k-sample/msn1.fold1.test.5k.txt.gz",
    "LightGBM-lambdarank/rank.train.gz",
    "LightGBM-lambdarank/rank.test.gz",
]


def _reference(path: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """scikit-learn's reading (numeric part only) as an independent reference."""
    data = gzip.decompress(path.read_bytes())
    if b"qid:" in data[:200]:
        x, y, q = load_svmlight_file(io.BytesIO(data), query_id=True, zero_based=False)
    else:
        x, y = load_svmlight_file(io.BytesIO(data), zero_based=False)
        q = None
    return x.astype(np.float32).toarray(), y, q


# ----------------------------------------------------------------------------- real files
@pytest.mark.parametrize("name", SHARED_FILES)
def test_shared_file_matches_sklearn_and_round_trips(shared_dir, tmp_path, name):
    path = shared_dir / "data" / name
    ds = load_letor(path, cache=False)
    x, y, q = _reference(path)
    assert ds.features.dtype == np.float32
    np.testing.assert_array_equal(ds.features[:, : x.shape[1]], x)
    assert np.all(ds.features[:, x.shape[1]:] == 0)
    np.testing.assert_array_equal(ds.labels, y.astype(np.float32))
    if q is not None:
        np.testing.assert_array_equal(np.repeat(ds.qids, ds.list_sizes).astype(np.int64), q)
    else:  # LightGBM: the boundaries come from the .query side file
        sizes = np.loadtxt(str(path).removesuffix(".gz") + ".query", dtype=np.int64)
        np.testing.assert_array_equal(ds.list_sizes, sizes)
    # read -> write -> read
    out = tmp_path / "copy.txt.gz"
    write_letor(out, ds)
    again = load_letor(out, n_features=ds.n_features, cache=False)
    np.testing.assert_array_equal(again.features, ds.features)
    np.testing.assert_array_equal(again.labels, ds.labels)
    np.testing.assert_array_equal(again.qids, ds.qids)
    np.testing.assert_array_equal(again.offsets, ds.offsets)
    np.testing.assert_array_equal(again.doc_ids, ds.doc_ids)


def test_mq2008_doc_ids_and_mslr_crlf(shared_dir):
    mq = load_letor(shared_dir / "data/MQ2008/Fold1/test.txt.gz", cache=False)
    assert mq.doc_ids[0] == "GX004-93-7097963" and mq.n_features == 46
    assert mq.line_numbers[0] == 1 and mq.line_numbers[-1] == mq.n_docs
    mslr_path = shared_dir / "data/MSLR-WEB-Fold1-5k-sample/msn1.fold1.train.5k.txt.gz"
    assert b"\r\n" in gzip.decompress(mslr_path.read_bytes())[:5000]
    mslr = load_letor(mslr_path, cache=False)
    assert mslr.n_features == 136 and mslr.n_docs == 5000 and mslr.n_queries == 43
    assert mslr.doc_ids[4] == "5"  # no comment: the line number


# ----------------------------------------------------------------------------- formats
def test_comments_blank_lines_crlf_and_sparse():
    text = b"# header comment\r\n\r\n2 qid:a 3:0.5 #docid = D1 x = 1\r\n0 qid:a 1:-1e-3\r\n1 qid:b 2:7\n"
    ds = parse_letor(text, source="t.txt")
    assert ds.n_features == 3
    np.testing.assert_array_equal(ds.features, np.float32([[0, 0, 0.5], [-1e-3, 0, 0], [0, 7, 0]]))
    np.testing.assert_array_equal(ds.doc_ids, ["D1", "4", "5"])
    np.testing.assert_array_equal(ds.line_numbers, [3, 4, 5])
    np.testing.assert_array_equal(ds.qids, ["a", "b"])
    np.testing.assert_array_equal(ds.offsets, [0, 2, 3])


def test_zero_based_auto_and_explicit():
    text = b"1 qid:1 0:1 2:3\n0 qid:1 1:2\n"
    ds = parse_letor(text)
    np.testing.assert_array_equal(ds.features, [[1, 0, 3], [0, 2, 0]])
    one = parse_letor(b"1 qid:1 1:1 2:3\n", zero_based=True)
    np.testing.assert_array_equal(one.features, [[0, 1, 3]])
    # an index at n_features names why the file is zero-based (it said "index 0 occurs on line None")
    with pytest.raises(DataFormatError, match=r"<bytes>:1: .* \(indices are zero-based: zero_based=True\)$"):
        parse_letor(b"1 qid:1 1:1 2:3\n", zero_based=True, n_features=2)
    with pytest.raises(DataFormatError, match=r"zero-based: index 0 occurs on line 1\)$"):
        parse_letor(text, n_features=2)


def test_index_base_errors_have_their_own_type():
    # predict and a config's valid/test add why the base was chosen to these, and to no other error
    from smoothrank.errors import IndexBaseError

    for text, options in [(b"1 qid:1 1:1 2:3\n", {"zero_based": True, "n_features": 2}),
                          (b"1 qid:1 0:1 2:3\n", {"zero_based": False})]:
        with pytest.raises(IndexBaseError):
            parse_letor(text, **options)
    with pytest.raises(DataFormatError) as info:
        parse_letor(b"1 qid:1 1:nan\n", zero_based=False)
    assert not isinstance(info.value, IndexBaseError)


def test_null_values_fill_policy(tmp_path):
    path = _write(tmp_path, "1 qid:1 1:NULL 2:0.5\n0 qid:1 1:0.25 2:NULL\n")
    np.testing.assert_array_equal(load_letor(path).features, [[0, 0.5], [0.25, 0]])
    np.testing.assert_array_equal(load_letor(path, null_value=-1.0).features, [[-1, 0.5], [0.25, -1]])
    with pytest.raises(DataFormatError, match=rf"{re.escape(str(path))}:1: NULL"):
        load_letor(path, null_value=None)


def test_real_and_negative_labels_when_allowed(tmp_path):
    path = _write(tmp_path, "0.5 qid:1 1:1\n-2 qid:1 1:2\n")
    ds = load_letor(path, allow_real_labels=True, allow_negative_labels=True)
    np.testing.assert_array_equal(ds.labels, [0.5, -2])


def test_integer_labels_beyond_float32s_exact_range_are_refused(tmp_path):
    # float32 holds every integer up to 2^24 only: 16777217 used to be read as 16777216.
    path = _write(tmp_path, "0 qid:1 1:1\n16777216 qid:1 1:2\n16777217 qid:2 1:3\n0 qid:2 1:1\n")
    for read in (lambda: load_letor(path), lambda: parse_letor(path.read_bytes())):
        with pytest.raises(DataFormatError, match=r":3: the label '16777217' is beyond 2\^24"):
            read()
    ok = _write(tmp_path, "0 qid:1 1:1\n16777216 qid:1 1:2\n", name="ok.txt")
    np.testing.assert_array_equal(load_letor(ok).labels, [0, 2**24])
    # Real-valued labels are read as float32 values, rounded as any real number is.
    assert load_letor(path, allow_real_labels=True).labels[2] == np.float32(16777217)


def test_lightgbm_query_file_explicit_and_auto(tmp_path):
    data = _write(tmp_path, "1 1:1\n0 1:2\n2 2:3\n", name="rank.train")
    (tmp_path / "rank.train.query").write_text("2\n1\n")
    auto = load_letor(data)
    np.testing.assert_array_equal(auto.offsets, [0, 2, 3])
    np.testing.assert_array_equal(auto.qids, ["0", "1"])
    other = tmp_path / "groups.txt"
    other.write_text("1\n2\n")
    np.testing.assert_array_equal(load_letor(data, query_file=other).offsets, [0, 1, 3])


def test_regroup_keeps_line_numbers(tmp_path):
    path = _write(tmp_path, "1 qid:a 1:1\n0 qid:b 1:2\n2 qid:a 1:3\n1 qid:c 1:4\n")
    ds = load_letor(path, regroup=True)
    np.testing.assert_array_equal(ds.qids, ["a", "b", "c"])
    np.testing.assert_array_equal(ds.features[:, 0], [1, 3, 2, 4])
    np.testing.assert_array_equal(ds.line_numbers, [1, 3, 2, 4])
    np.testing.assert_array_equal(ds.offsets, [0, 2, 3, 4])


# ----------------------------------------------------------------------------- bad input
BAD_CASES = {
    "non_numeric_label": ("1 qid:1 1:1\nhigh qid:1 1:2\n", {}, 2, "label 'high' is not a number"),
    "non_numeric_value": ("1 qid:1 1:1\n0 qid:1 1:abc\n", {}, 2, "not a number"),
    "missing_qid": ("1 qid:1 1:1\n0 1:2\n", {}, 2, "missing 'qid:'"),
    "repeated_index": ("1 qid:1 1:1 2:3\n0 qid:1 1:2 3:1 3:4\n", {}, 2, "feature index 3 repeated"),
    "nan_value": ("1 qid:1 1:1\n0 qid:1 1:nan\n", {}, 2, "non-finite feature value"),
    "inf_value": ("1 qid:1 1:inf\n", {}, 1, "non-finite feature value"),
    "nan_label": ("1 qid:1 1:1\nnan qid:1 1:1\n", {}, 2, "is not finite"),
    "overflow_float32": ("1 qid:1 1:1e39\n", {}, 1, "float32 range"),
    "interleaved_qid": ("1 qid:1 1:1\n0 qid:2 1:1\n1 qid:1 1:1\n", {}, 3, "reappears"),
    "index_beyond_n_features": ("1 qid:1 1:1 2:1\n0 qid:1 1:1 5:1\n", {"n_features": 3}, 2,
                                "beyond n_features=3"),
    "fractional_label": ("1 qid:1 1:1\n0.5 qid:1 1:1\n", {}, 2, "not an integer"),
    "negative_label": ("1 qid:1 1:1\n-1 qid:1 1:1\n", {}, 2, "is negative"),
    "two_colons": ("1 qid:1 1:1\n0 qid:1 1:2:3 4\n", {}, 2, "expected <index>:<value>"),
    "empty_value": ("0 qid:1 1: 2:1\n", {}, 1, "not a number"),
    "bad_index": ("0 qid:1 x1:1\n", {}, 1, "not a non-negative integer"),
    "index_zero_one_based": ("0 qid:1 0:1\n", {"zero_based": False}, 1, "feature index 0"),
    "empty_qid": ("0 qid: 1:1\n", {}, 1, "empty query id"),
    "qid_not_second": ("0 1:1 qid:3\n1 qid:3 1:1\n", {}, 1, "must be the second token"),
    # a qid run into the next token: it used to be read as qid '1\xa01:1' with no features, silently
    "nbsp_after_qid": ("1 qid:1 1:1\n0 qid:1\u00a01:1\n", {}, 2,
                       "the qid '1\\xa01:1' contains a non-breaking space (U+00A0, bytes C2 A0), which does "
                       "not separate tokens"),
    "em_space_in_qid": ("1 qid:7\u20031:1\n", {}, 1, "contains non-ASCII whitespace (U+2003)"),
    "colon_in_qid": ("1 qid:1 1:1\n0 qid:a:b 1:1\n", {}, 2, "the qid 'a:b' contains ':'"),
    # the same space elsewhere: the token is named and so is the space
    "nbsp_after_label": ("2\u00a0qid:1 1:1\n", {}, 1,
                         "the label '2\\xa0qid:1' (holding a non-breaking space (U+00A0, bytes C2 A0), "
                         "which does not separate tokens"),
    "nbsp_between_features": ("1 qid:1 1:1\n0 qid:1 1:0.5\u00a02:1\n", {}, 2,
                              "got '1:0.5\\xa02:1' (holding a non-breaking space"),
    "em_space_in_value": ("1 qid:1 1:0.5\u20032:1\n", {}, 1, "(holding non-ASCII whitespace (U+2003)"),
}


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_bad_input_names_file_and_line(tmp_path, case):
    text, options, line, message = BAD_CASES[case]
    path = _write(tmp_path, text, name=f"{case}.txt")
    with pytest.raises(DataFormatError) as info:
        load_letor(path, query_file=None, **options)
    assert str(info.value).startswith(f"{path}:{line}: "), str(info.value)
    assert message in str(info.value)


def test_bad_input_in_gzip_and_later_chunk(tmp_path):
    lines = [f"{i % 3} qid:{i // 10} 1:{i} 2:0.5" for i in range(5000)]
    lines[4321] = "1 qid:432 1:3 2:oops"
    path = tmp_path / "big.txt.gz"
    path.write_bytes(gzip.compress("\n".join(lines).encode()))
    with pytest.raises(DataFormatError, match=r"big\.txt\.gz:4322: "):
        load_letor(path, cache=False)


def test_zero_based_index_equal_to_n_features(tmp_path):
    path = _write(tmp_path, "1 qid:1 1:1 3:1\n0 qid:1 0:1\n")
    with pytest.raises(DataFormatError, match=rf"{re.escape(str(path))}:1: feature index 3 is beyond"):
        load_letor(path, n_features=3)


def test_query_file_problems(tmp_path):
    data = _write(tmp_path, "1 1:1\n0 1:2\n2 2:3\n", name="r.txt")
    groups = tmp_path / "g.query"
    groups.write_text("2\nx\n")
    with pytest.raises(DataFormatError, match=rf"{re.escape(str(groups))}:2: "):
        load_letor(data, query_file=groups)
    groups.write_text("2\n2\n")
    with pytest.raises(DataFormatError, match="add up to 4"):
        load_letor(data, query_file=groups)
    with_qid = _write(tmp_path, "1 qid:1 1:1\n", name="q.txt")
    groups.write_text("1\n")
    with pytest.raises(DataFormatError, match=r"q\.txt:1: has 'qid:'"):
        load_letor(with_qid, query_file=groups)


def test_empty_file_and_bad_options(tmp_path):
    with pytest.raises(DataFormatError, match="no data lines"):
        load_letor(_write(tmp_path, "# only a comment\n\n"))
    with pytest.raises(FileNotFoundError):
        load_letor(tmp_path / "absent.txt")
    path = _write(tmp_path, "1 qid:1 1:1\n")
    with pytest.raises(SmoothrankError, match="n_features"):
        load_letor(path, n_features=0)
    with pytest.raises(SmoothrankError, match="zero_based"):
        load_letor(path, zero_based="yes")


@pytest.mark.parametrize(("option", "value", "message"), [
    ("zero_based", 0, r"zero_based: expected True, False or 'auto', got 0; for a dataset's index base "
                      r"\(0 or 1\) pass zero_based=\(index_base == 0\)"),
    ("zero_based", 1, r"zero_based: expected True, False or 'auto', got 1; .*\(index_base == 0\)"),
    ("zero_based", "no", r"zero_based: expected True, False or 'auto', got 'no'$"),
    ("allow_real_labels", "no", r"allow_real_labels: expected True or False, got 'no'$"),
    ("allow_negative_labels", 1, r"allow_negative_labels: expected True or False, got 1$"),
    ("regroup", "yes", r"regroup: expected True or False, got 'yes'$"),
    ("cache", "no", r"cache: expected True or False, got 'no'$"),
], ids=["zero_based=0", "zero_based=1", "zero_based=no", "allow_real_labels=no", "allow_negative_labels=1",
        "regroup=yes", "cache=no"])
def test_boolean_reader_options_take_only_bools(tmp_path, option, value, message):
    # A review found load_letor(test, zero_based=train.index_base) with base 0 read as zero_based=False
    # (every column shifted) and allow_real_labels="no" allowing real labels (a truthy string).
    path = _write(tmp_path, "0.5 qid:1 0:1 1:2\n")
    with pytest.raises(SmoothrankError, match=rf"^{message}"):
        load_letor(path, **{option: value})
    if option != "cache":
        with pytest.raises(SmoothrankError, match=rf"^{message}"):
            parse_letor(b"1 qid:1 1:1\n", **{option: value})
    # a numpy bool (from a comparison) is a bool, and "auto" stays where documented
    ds = load_letor(path, zero_based=np.int64(0) == 0, allow_real_labels=np.bool_(True), cache=False)
    assert ds.index_base == 0 and ds.labels.tolist() == [0.5]
    assert load_letor(path, zero_based="auto", allow_real_labels=True).index_base == 0
    assert letor.ReaderOptions(zero_based=np.bool_(False)).as_dict()["zero_based"] is False


def test_load_mq2008_takes_only_a_bool_cache():
    from smoothrank.datasets import load_mq2008

    with pytest.raises(SmoothrankError, match=r"^cache: expected True or False, got 0$"):
        load_mq2008(1, "test", cache=0)


# ----------------------------------------------------------------------------- properties
@st.composite
def letor_files(draw):
    n_features = draw(st.integers(1, 6))
    n_queries = draw(st.integers(1, 4))
    values = st.floats(-1e6, 1e6, allow_nan=False, width=32)
    rows = []
    for q in range(n_queries):
        for _ in range(draw(st.integers(1, 4))):
            label = draw(st.integers(0, 4))
            present = draw(st.lists(st.booleans(), min_size=n_features, max_size=n_features))
            feats = {j: draw(values) for j in range(n_features) if present[j]}
            rows.append((label, f"q{q}", feats))
    crlf = draw(st.booleans())
    return n_features, rows, crlf


@settings(max_examples=30, deadline=None)
@given(letor_files())
def test_reader_recovers_generated_files(spec):
    n_features, rows, crlf = spec
    eol = "\r\n" if crlf else "\n"
    text = eol.join(f"{lab} qid:{q} " + " ".join(f"{j + 1}:{v!r}" for j, v in sorted(f.items()))
                    + f" #docid = d{i}" for i, (lab, q, f) in enumerate(rows)) + eol
    ds = parse_letor(text.encode(), n_features=n_features)
    expected = np.zeros((len(rows), n_features), dtype=np.float32)
    for i, (_, _, f) in enumerate(rows):
        for j, v in f.items():
            expected[i, j] = v
    np.testing.assert_array_equal(ds.features, expected)
    np.testing.assert_array_equal(ds.labels, [r[0] for r in rows])
    assert list(ds.qids) == list(dict.fromkeys(r[1] for r in rows))
    assert list(ds.doc_ids) == [f"d{i}" for i in range(len(rows))]
    assert ds.offsets[-1] == len(rows)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.sampled_from(["a", "b", "c"]), min_size=2, max_size=12))
def test_interleaving_detected_exactly(qids):
    text = "".join(f"1 qid:{q} 1:{i}\n" for i, q in enumerate(qids)).encode()
    blocks = [q for i, q in enumerate(qids) if i == 0 or qids[i - 1] != q]
    if len(blocks) == len(set(blocks)):
        ds = parse_letor(text)
        assert list(ds.qids) == blocks
    else:
        with pytest.raises(DataFormatError, match="reappears"):
            parse_letor(text)
        ds = parse_letor(text, regroup=True)
        order = list(dict.fromkeys(qids))
        expected_rows = sorted(range(len(qids)), key=lambda i: order.index(qids[i]))
        np.testing.assert_array_equal(ds.features[:, 0], expected_rows)
        np.testing.assert_array_equal(ds.line_numbers, np.asarray(expected_rows) + 1)


# ----------------------------------------------------------------------------- cache
def test_cache_hit_and_invalidation(tmp_path):
    path = _write(tmp_path, "1 qid:1 1:1 2:2\n0 qid:1 1:3\n")
    first = load_letor(path, cache=True)
    assert len(data_store.entries()) == 1
    second = load_letor(path, cache=True)
    assert isinstance(second.features, np.memmap) and not second.features.flags.writeable
    np.testing.assert_array_equal(first.features, second.features)
    assert first.index_base == second.index_base == 1  # kept by the store
    np.testing.assert_array_equal(first.doc_ids, second.doc_ids)
    assert second.source == str(path)
    # options that read the file the same way share its entry; a wider n_features is another entry
    assert load_letor(path, cache=True, n_features=2, zero_based=False, regroup=True).n_features == 2
    assert len(data_store.entries()) == 1
    third = load_letor(path, cache=True, n_features=4)
    assert third.n_features == 4 and len(data_store.entries()) == 2
    # the content changes: the cache must not answer with the old data
    path.write_text("2 qid:1 1:5\n")
    changed = load_letor(path, cache=True)
    np.testing.assert_array_equal(changed.features, [[5]])
    assert len(data_store.entries()) == 1  # the stale entries were removed
    del first, second, third, changed  # maps of files damaged below
    # a damaged entry is ignored
    for info in data_store.entries():
        for npy in info.path.glob("*.npy"):
            npy.write_bytes(b"garbage")
    np.testing.assert_array_equal(load_letor(path, cache=True).features, [[5]])
    assert not [p for p in data_store.cache_dir().iterdir() if p.name.startswith(".tmp-")]


# ----------------------------------------------------------------------------- compiled fast path
# Inputs of FAST_MIN_BYTES or more go through the compiled scanner first; it must read exactly what
# the strict parser reads, and leave everything doubtful (and every error) to the strict parser.
FIELDS = ("features", "labels", "qids", "doc_ids", "offsets", "line_numbers")


def _outcome(parse):
    try:
        return parse()
    except DataFormatError as error:
        return str(error)


def _strict(data: bytes, sizes=None, **options):
    return _outcome(lambda: letor._parse_lines([data.splitlines(keepends=True)], source="t.txt",
                                               options=letor.ReaderOptions(**options), query_sizes=sizes,
                                               query_source="query_sizes"))


def _fast(data: bytes, sizes=None, chunk=1 << 24, **options):
    return _outcome(lambda: letor._fast_parse(letor._memory_chunks(data, chunk), source="t.txt",
                                              options=letor.ReaderOptions(**options), query_sizes=sizes,
                                              query_source="query_sizes"))


def _assert_same(a, b):
    assert isinstance(a, letor.Dataset) and isinstance(b, letor.Dataset), (a, b)
    for name in FIELDS:
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype and x.shape == y.shape, name
        np.testing.assert_array_equal(x, y, err_msg=name)


@pytest.mark.parametrize("name", SHARED_FILES)
def test_fast_path_reads_shared_files_like_the_strict_parser(shared_dir, name):
    path = shared_dir / "data" / name
    data = gzip.decompress(path.read_bytes())
    side = Path(str(path).removesuffix(".gz") + ".query")
    sizes = np.loadtxt(side, dtype=np.int64) if side.exists() else None
    # small chunks: queries and CRLF line ends straddle chunk boundaries
    _assert_same(_fast(data, sizes, chunk=50_000), _strict(data, sizes))


CLEAN_CASES = {
    "comments_crlf_blank": (b"# head\r\n\r\n2 qid:a 3:0.5 #docid = D1 x = 1\r\n0 qid:a 1:-1e-3\r\n"
                            b"1 qid:b 2:7\n", {}),
    "docid_forms": (b"1 qid:1 1:1 #docid=A\n1 qid:1 1:1 # x docid =B docid = C\n0 qid:1 1:1 #docid =\r\n"
                    b"0 qid:1 1:1 # docid\n1 qid:1 1:2 ##docid\t=\x0bE#F", {}),
    "zero_based_auto": (b"1 qid:1 0:1 2:3\n0 qid:1 1:2\n", {}),
    "zero_based_true": (b"1 qid:1 1:1 2:3\n", {"zero_based": True}),
    "null_default": (b"1 qid:1 1:NULL 2:0.5\n0 qid:1 1:0.25 2:NULL\n", {}),
    "null_filled": (b"1 qid:1 1:NULL 2:0.5\n0 qid:1 1:0.25 2:NULL\n", {"null_value": -1.5}),
    "real_negative_labels": (b"0.5 qid:1 1:1\n-2 qid:1 1:2\n+1e0 qid:1 1:3\n",
                             {"allow_real_labels": True, "allow_negative_labels": True}),
    "number_forms": (b"1 qid:1 1:+.5 2:5. 3:-0 4:1E3 5:007 6:1e-40 7:3.4028234e38 8:0.12345678901234567 "
                     b"9:123456789012345678901 10:1e+30 11:-2.5e-7 12:000000000000000000000000001\n", {}),
    "whitespace": (b"  1\tqid:7\x0b 1:1 \x0c 2:2\t\r\n", {}),
    "utf8_ids": ("1 qid:é 1:1 #docid = dé\n".encode(), {}),
    "regroup": (b"1 qid:a 1:1\n0 qid:b 1:2\n2 qid:a 1:3\n", {"regroup": True}),
    "n_features_wider": (b"1 qid:1 1:1\n", {"n_features": 4}),
    "index_equal_n_features_one_based": (b"1 qid:1 3:1\n", {"n_features": 3}),
    "no_features": (b"1 qid:1\n2 qid:1 # only a label\n", {}),
    "sizes": (b"1 1:1\n0 2:2\n2 3:3\n", {"sizes": [2, 1]}),
}


@pytest.mark.parametrize("case", sorted(CLEAN_CASES))
def test_fast_path_accepts_clean_input_exactly(case):
    text, options = CLEAN_CASES[case]
    options = dict(options)
    sizes = options.pop("sizes", None)
    sizes = None if sizes is None else np.asarray(sizes, dtype=np.int64)
    fast = _fast(text, sizes, **options)
    assert fast is not None, "the scanner should read this itself"
    _assert_same(fast, _strict(text, sizes, **options))


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_fast_path_never_accepts_bad_input(case):
    text, options, line, message = BAD_CASES[case]
    fast = _fast(text.encode(), **options)
    strict = _strict(text.encode(), **options)
    assert isinstance(strict, str) and strict.startswith(f"t.txt:{line}: ") and message in strict
    assert fast is None or fast == strict  # handed to the strict parser, or the same shared check


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_bad_input_on_the_fast_path_names_file_and_line(tmp_path, monkeypatch, case):
    monkeypatch.setattr(letor, "FAST_MIN_BYTES", 0)
    test_bad_input_names_file_and_line(tmp_path, case)


def test_fast_path_hands_over_doubtful_input():
    doubtful = [b"1 qid:1 2:1 1:1\n",  # unsorted (but valid): the strict parser reads it
                b"1 qid:1 1:1\r0 qid:1 1:2\n",  # lone CR: a line break for bytes.splitlines
                b"1 qid:1 1:3.4028236e38\n",  # beyond float32 after exact rounding
                b"1 qid:1 1:1e400\n", b"1 qid:1 1:1\n\xff qid:1 1:1\n", b"1 qid:1 1:1 #docid = \xff\n",
                b"", b"# nothing\n"]
    for text in doubtful:
        assert _fast(text) is None, text
    # query-level checks are shared (letor._assemble): the same message either way
    bad_qid = b"1 qid:\xff 1:1\n"
    assert _fast(bad_qid) == _strict(bad_qid) == "t.txt:1: the qid b'\\xff' is not valid UTF-8"
    _assert_same(parse_letor(b"1 qid:1 2:1 1:1\n"), _strict(b"1 qid:1 2:1 1:1\n"))


def test_large_file_with_late_error_on_both_paths(tmp_path, monkeypatch):
    lines = [f"{i % 3} qid:{i // 10} 1:{i} 2:0.5 #docid = d{i}" for i in range(20000)]
    clean = ("\n".join(lines) + "\n").encode()
    assert len(clean) >= letor.FAST_MIN_BYTES
    path = tmp_path / "big.txt"
    path.write_bytes(clean)
    ds = load_letor(path, cache=False)
    assert ds.doc_ids[-1] == "d19999" and ds.features[-1, 0] == 19999
    _assert_same(ds, _strict(clean))
    lines[17321] = "1 qid:1732 1:3 2:0x5"
    path.write_bytes("\n".join(lines).encode())
    with pytest.raises(DataFormatError, match=r"big\.txt:17322: the feature value in '2:0x5' is not a"):
        load_letor(path, cache=False)


_VALID = ["1", "0", "2", "-1", "0.5", "+.5", "5.", "1e3", "1e-50", "NULL", "0.12345678901234567", "3.3e38",
          "007", "-0", "1E+2", "123456789012345678901", "-2.5e-7"]
_ODD = ["nan", "inf", "x", "", "1_0", "1e", "0x5", "--1", ".", "1.2.3"]


@st.composite
def odd_files(draw):
    """Half clean files (the scanner reads them itself), half with odd tokens anywhere."""
    clean = draw(st.booleans())
    tokens = st.sampled_from(_VALID if clean else _VALID + _ODD)
    lines = []
    for _ in range(draw(st.integers(1, 6))):
        label = draw(st.sampled_from(["0", "1", "2", "+1", "1e0", "-0", "007", "3."]) if clean else tokens)
        qid = draw(st.sampled_from(["qid:1", "qid:2", "qid:1:2"] + ([] if clean else ["qid:", ""])))
        if clean:
            indices = sorted(draw(st.sets(st.sampled_from(["0", "1", "2", "3"]), max_size=3)))
        else:
            indices = draw(st.lists(st.sampled_from(["0", "1", "2", "3", "a", ""]), max_size=3))
        feats = [f"{index}:{draw(tokens)}" for index in indices]
        comment = draw(st.sampled_from(["", " #docid = D", "#docid=", " # c"]))
        lines.append(" ".join(t for t in [label, qid, *feats] if t) + comment)
    eol = draw(st.sampled_from(["\n", "\r\n"]))
    return (eol.join(lines) + draw(st.sampled_from(["", eol]))).encode()


@settings(max_examples=60, deadline=None)
@given(odd_files(), st.sampled_from([{}, {"null_value": None}, {"n_features": 2}, {"zero_based": False},
                                     {"regroup": True, "allow_real_labels": True}]))
def test_fast_path_agrees_with_strict_parser_on_odd_files(data, options):
    fast, strict = _fast(data, **options), _strict(data, **options)
    if fast is None:
        return  # handed over: the strict parser's answer is the answer
    if isinstance(strict, str):
        assert fast == strict
    else:
        _assert_same(fast, strict)
