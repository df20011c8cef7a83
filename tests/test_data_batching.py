"""Training slates, SoftRank subsampling, length-bucketed evaluation batches, transforms, writers."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from smoothrank.data import (
    Dataset,
    evaluation_batches,
    load_letor,
    read_predictions,
    training_batches,
    write_predictions,
    write_qrels,
    write_trec_run,
)
from smoothrank.data.batching import softrank_sample
from smoothrank.data.transforms import (
    Compose,
    QueryMinMax,
    SignedLog1p,
    Standardize,
    Transform,
    transform_from_state,
    transformed,
)
from smoothrank.errors import DataFormatError, SmoothrankError


def _toy(sizes=(3, 1, 7, 2), n_features=2, seed=0) -> Dataset:
    rng = np.random.default_rng(seed)
    n = sum(sizes)
    qids = np.repeat(np.arange(len(sizes)), sizes)
    labels = rng.integers(0, 3, n)
    return Dataset.from_arrays(rng.normal(size=(n, n_features)), labels, qids,
                               doc_ids=[f"d{i}" for i in range(n)])


def _check_batch(ds: Dataset, batch) -> None:
    mask = batch.mask.numpy()
    rows = batch.rows.numpy()
    assert batch.features.dtype == torch.float32 and batch.mask.dtype == torch.bool
    assert np.all((rows >= 0) == mask)
    np.testing.assert_array_equal(batch.features.numpy()[mask], ds.features[rows[mask]])
    np.testing.assert_array_equal(batch.labels.numpy()[mask], ds.labels[rows[mask]])
    assert np.all(batch.features.numpy()[~mask] == 0)
    for b, q in enumerate(batch.query_index.tolist()):  # each row belongs to its query
        assert np.all((rows[b][mask[b]] >= ds.offsets[q]) & (rows[b][mask[b]] < ds.offsets[q + 1]))
        assert len(set(rows[b][mask[b]].tolist())) == mask[b].sum()


def test_training_batches_pad_and_subsample():
    ds = _toy()
    batches = list(training_batches(ds, list_size=4, batch_size=3, seed_or_generator=1))
    assert [b.features.shape for b in batches] == [(3, 4, 2), (1, 4, 2)]
    seen = []
    for batch in batches:
        _check_batch(ds, batch)
        seen += batch.query_index.tolist()
        for b, q in enumerate(batch.query_index.tolist()):
            assert batch.mask[b].sum().item() == min(4, ds.list_sizes[q])
    assert sorted(seen) == [0, 1, 2, 3]


def test_pad_longest_is_the_same_slates_with_less_padding():
    ds = _toy(sizes=(3, 1, 7, 2, 5))
    full = list(training_batches(ds, list_size=6, batch_size=2, seed_or_generator=4))
    short = list(training_batches(ds, list_size=6, batch_size=2, seed_or_generator=4, pad="longest"))
    assert [b.mask.shape[1] for b in short] == [int(b.mask.sum(1).max()) for b in full]
    for a, b in zip(full, short, strict=True):
        _check_batch(ds, b)
        width = b.mask.shape[1]
        assert torch.equal(a.rows[:, :width], b.rows) and not a.mask[:, width:].any()
    with pytest.raises(SmoothrankError, match="pad"):
        next(training_batches(ds, list_size=6, batch_size=2, seed_or_generator=4, pad="max"))


@pytest.mark.parametrize("sampling", ["random", "softrank"])
@pytest.mark.parametrize("pad", ["list_size", "longest"])
def test_the_shards_of_every_world_size_make_up_the_single_process_batches(sampling, pad):
    # torchrun: the same epoch for any number of processes, each taking its share of every batch
    ds = _toy(sizes=(3, 1, 7, 2, 5, 4, 6, 2, 8, 1, 3), seed=2)
    args = {"list_size": 5, "batch_size": 4, "seed_or_generator": 7, "sampling": sampling, "pad": pad}
    whole = list(training_batches(ds, **args))
    for world in (1, 2, 3, 5):
        shares = [list(training_batches(ds, **args, shard=(rank, world))) for rank in range(world)]
        assert all(len(s) == len(whole) for s in shares)
        for step, batch in enumerate(whole):
            parts = [s[step] for s in shares]
            sizes = [p.features.shape[0] for p in parts]
            assert sizes == [len(a) for a in np.array_split(np.arange(batch.features.shape[0]), world)]
            for name in ("features", "labels", "mask", "query_index", "rows"):
                assert torch.equal(torch.cat([getattr(p, name) for p in parts]), getattr(batch, name)), name
    with pytest.raises(SmoothrankError, match=r"shard: expected \(rank, world_size\)"):
        next(training_batches(ds, **args, shard=(2, 2)))


def test_training_batches_reproducible_and_uniform():
    ds = _toy(sizes=(6,))
    a = [b.rows for b in training_batches(ds, list_size=3, batch_size=1, seed_or_generator=5)]
    b = [b.rows for b in training_batches(ds, list_size=3, batch_size=1, seed_or_generator=5)]
    assert all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    rng = np.random.default_rng(0)
    counts = np.zeros(6)
    for _ in range(600):
        for batch in training_batches(ds, list_size=3, batch_size=1, seed_or_generator=rng):
            counts[batch.rows[0].numpy()] += 1
    # each document is kept with probability 1/2: 300 +- 3 sd (sd ~ 12)
    assert np.all(np.abs(counts - 300) < 40), counts


def test_training_without_shuffle_keeps_order():
    ds = _toy()
    batch = next(training_batches(ds, list_size=10, batch_size=4, shuffle=False, seed_or_generator=0))
    assert batch.query_index.tolist() == [0, 1, 2, 3]
    np.testing.assert_array_equal(batch.rows[2, :7].numpy(), np.arange(4, 11))


def test_softrank_sampling():
    labels = np.array([0, 2, 0, 0, 1, 0, 0, 0], dtype=np.float32)
    rng = np.random.default_rng(0)
    for _ in range(20):
        kept = softrank_sample(labels, rng)
        assert {1, 4} <= set(kept.tolist()) and kept.shape[0] == 4  # 2 judged + 2 irrelevant
    many = np.r_[np.ones(40), np.zeros(100)].astype(np.float32)
    assert softrank_sample(many, rng).shape[0] == 70  # 40 relevant + the cap of 30
    ds = Dataset.from_arrays(np.zeros((5, 1)), [0, 0, 1, 0, 0], [0, 0, 1, 1, 1])
    batches = list(training_batches(ds, list_size=4, batch_size=2, seed_or_generator=0, sampling="softrank"))
    assert [b.query_index.tolist() for b in batches] == [[1]]  # query 0 has no relevant document
    assert batches[0].mask.sum().item() == 2
    for bad in (2.5, -1, True, "3"):
        with pytest.raises(SmoothrankError, match="softrank_max_extra: expected an integer >= 0"):
            list(training_batches(ds, list_size=4, batch_size=2, seed_or_generator=0, sampling="softrank",
                                  softrank_max_extra=bad))


def test_query_minmax_works_in_float64_where_a_span_overflows_float32():
    # -3e38 .. 3e38 is a span of 6e38, inf in float32: the transform gave NaN (and wrong values).
    ds = Dataset.from_arrays(np.array([[-3e38], [3e38], [0.0]], np.float32), [0, 1, 0], ["a"] * 3)
    np.testing.assert_allclose(QueryMinMax().fit_transform(ds).features.ravel(), [0.0, 1.0, 0.5])


def _big(n_docs=60_000, n_features=40, seed=1) -> Dataset:
    rng = np.random.default_rng(seed)
    features = (rng.standard_normal((n_docs, n_features)) * rng.uniform(0.1, 1e3, n_features)
                + rng.uniform(-1e3, 1e3, n_features)).astype(np.float32)
    qids = np.repeat(np.arange(n_docs // 20), 20)
    return Dataset.from_arrays(features, rng.integers(0, 3, n_docs), qids)


@pytest.mark.parametrize("make", [Standardize, QueryMinMax])
def test_transforms_give_the_float64_formulas_to_the_bit_without_a_float64_copy(make):
    # PITFALLS 15: Standardize and QueryMinMax made float64 copies of the whole split (a peak of 4x
    # and 6x the float32 features); they now work a block of rows at a time, to the same bits.
    import tracemalloc

    ds = _big()
    x = ds.features.astype(np.float64)
    if make is Standardize:
        std = x.std(axis=0)
        expected = ((x - x.mean(axis=0)) / np.where(std > 0, std, 1.0)).astype(np.float32)
    else:
        starts = ds.offsets[:-1]
        lo, hi = np.minimum.reduceat(x, starts, axis=0), np.maximum.reduceat(x, starts, axis=0)
        q = ds.query_of_row()
        expected = ((x - lo[q]) / np.where(hi > lo, hi - lo, 1.0)[q]).astype(np.float32)
    del x
    transform = make().fit(ds)
    tracemalloc.start()
    try:
        out = transform.transform(ds).features
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    np.testing.assert_array_equal(out, expected)
    assert peak < 1.25 * ds.features.nbytes + (2 << 20), peak / ds.features.nbytes  # a float64 copy: 2x


def test_evaluation_batches_bucketed_full_lists():
    ds = _toy(sizes=(1, 50, 2, 3, 2, 1))
    batches = list(evaluation_batches(ds, batch_size=3, max_items=20))
    seen = sorted(q for b in batches for q in b.query_index.tolist())
    assert seen == list(range(6))
    for batch in batches:
        _check_batch(ds, batch)
        sizes = ds.list_sizes[batch.query_index.numpy()]
        assert batch.mask.shape[1] == sizes.max()
        assert batch.mask.sum(1).tolist() == sizes.tolist()  # full lists
        assert len(sizes) <= 3 and (len(sizes) == 1 or batch.mask.numel() <= 20)
    assert any(b.mask.shape == (1, 50) for b in batches)


def test_batch_argument_errors():
    ds = _toy()
    with pytest.raises(SmoothrankError, match="list_size"):
        next(training_batches(ds, list_size=0, batch_size=2, seed_or_generator=0))
    with pytest.raises(SmoothrankError, match="sampling"):
        next(training_batches(ds, list_size=2, batch_size=2, seed_or_generator=0, sampling="x"))
    with pytest.raises(SmoothrankError, match="seed_or_generator"):
        next(training_batches(ds, list_size=2, batch_size=2, seed_or_generator="a"))


def test_scatter_scores_back_to_rows():
    ds = _toy()
    out = np.full(ds.n_docs, np.nan)
    for batch in evaluation_batches(ds, batch_size=2):
        batch.scatter_scores(batch.rows.double() * 2, out)
    np.testing.assert_array_equal(out, np.arange(ds.n_docs) * 2.0)


def test_rows_of_one_query_interleaved_with_another_are_refused_in_memory_too():
    """PITFALLS 13: rows of one qid separated by another qid's rows are never grouped silently
    (the file reader says file:line, see test_data_reader; arrays are checked the same way)."""
    with pytest.raises(SmoothrankError, match="contiguous"):
        Dataset.from_arrays(np.zeros((3, 1)), [1, 0, 1], ["a", "b", "a"])
    ds = Dataset.from_arrays(np.zeros((3, 1)), [1, 0, 1], ["a", "a", "b"])
    assert ds.list_sizes.tolist() == [2, 1]


def test_negative_labels_stay_real_and_padding_is_only_the_mask():
    """PITFALLS 14: a real label of -1 reaches the batch as a real item (mask True), and padding is
    mask False with a zero label; nothing reads a label to find padding."""
    ds = Dataset.from_arrays(np.arange(5, dtype=np.float32).reshape(5, 1) + 1, [-1, 0, 2, -1, 1],
                             [0, 0, 0, 1, 1])
    for batch in (next(training_batches(ds, list_size=6, batch_size=2, shuffle=False, seed_or_generator=0)),
                  next(evaluation_batches(ds, batch_size=2))):
        _check_batch(ds, batch)
        real = batch.mask.numpy()
        assert (batch.labels.numpy()[real] == -1).sum() == 2  # both -1 rows are real items
        assert np.all(batch.labels.numpy()[~real] == 0) and (~real).any()


def test_features_are_float32_and_validation_lists_are_not_padded_to_the_longest_query():
    """PITFALLS 15: no float64 copy of the data (a Dataset holds float32 features only), and
    evaluation batches are length buckets bounded by ``max_items`` padded positions: a long query
    does not pad the short ones of the file to its length."""
    ds = Dataset.from_arrays(np.ones((6, 2), dtype=np.float64), [0, 1, 0, 1, 0, 1], [0, 0, 1, 1, 2, 2])
    assert ds.features.dtype == np.float32 and ds.labels.dtype == np.float32
    with pytest.raises(SmoothrankError, match="float32"):
        Dataset(ds.features.astype(np.float64), ds.labels, ds.qids, ds.doc_ids, ds.offsets, ds.line_numbers)
    sizes = (2,) * 30 + (500,)  # one long query among many short ones
    long_one = _toy(sizes=sizes)
    batches = list(evaluation_batches(long_one, batch_size=8, max_items=100))
    assert sorted(b.mask.shape[1] for b in batches) == [2, 2, 2, 2, 500]  # the long query alone is wide
    assert sum(b.mask.numel() for b in batches) == 30 * 2 + 500  # no padding at all here
    assert all(b.mask.numel() <= 100 or b.mask.shape[0] == 1 for b in batches)


# ----------------------------------------------------------------------------- transforms
def test_transforms_fit_on_train_and_restore():
    train, test = _toy(seed=1), _toy(seed=2)
    pipeline = Compose([SignedLog1p([0]), Standardize()]).fit(train)
    out = pipeline.transform(train).features.astype(np.float64)
    np.testing.assert_allclose(out.mean(0), 0, atol=1e-6)
    np.testing.assert_allclose(out.std(0), 1, atol=1e-5)
    state = json.loads(json.dumps(pipeline.state_dict()))
    again = transform_from_state(state).transform(test)
    np.testing.assert_array_equal(again.features, pipeline.transform(test).features)
    x = test.features.astype(np.float64)
    lx = np.sign(x[:, 0]) * np.log1p(np.abs(x[:, 0]))
    mean0 = (np.sign(train.features[:, 0]) * np.log1p(np.abs(train.features[:, 0]))).astype(np.float32)
    np.testing.assert_allclose(again.features[:, 0], (lx - mean0.mean()) / mean0.astype(np.float64).std(),
                               rtol=1e-4, atol=1e-5)
    with pytest.raises(SmoothrankError, match="fit"):
        Standardize().transform(train)


def test_query_min_max_and_constant_feature():
    ds = Dataset.from_arrays(np.array([[1, 5], [3, 5], [2, 5], [7, 1]]), [0, 1, 0, 1], [0, 0, 0, 1])
    out = QueryMinMax().transform(ds).features
    np.testing.assert_array_equal(out, [[0, 0], [1, 0], [0.5, 0], [0, 0]])
    const = Standardize().fit(ds).transform(ds.with_features(np.ones((4, 2), dtype=np.float32)))
    assert np.all(np.isfinite(const.features))


def test_transforms_applied_to_a_batch_give_the_rows_of_the_whole_transform(monkeypatch):
    # transformed(): the rows a batch reads, transformed when read, are those of transform() on the
    # whole split, to the bit; QueryMinMax takes its extremes over the whole query, not the slate.
    from smoothrank.data import store
    from smoothrank.data.transforms import TransformedDataset

    monkeypatch.setattr(store, "scratch_array", None)  # no file-backed copy either
    train, test = _toy(sizes=(30, 1, 70, 20, 45), n_features=4, seed=1), _toy(sizes=(9, 40, 3), n_features=4)
    steps = ([SignedLog1p(), Standardize()], [QueryMinMax(), SignedLog1p([1, 3]), Standardize()],
             [Standardize(), QueryMinMax()])
    for pipeline in (Compose(s).fit(train) for s in steps):
        for ds in (train, test):
            whole, view = pipeline.transform(ds), transformed(pipeline, ds)
            assert isinstance(view, TransformedDataset) and view.n_docs == ds.n_docs
            rows = np.random.default_rng(0).permutation(ds.n_docs)[: ds.n_docs // 2]
            np.testing.assert_array_equal(view.features[rows], whole.features[rows])
            np.testing.assert_array_equal(view.features[3:17], whole.features[3:17])
            np.testing.assert_array_equal(np.asarray(view.features), whole.features)
            slates = {"list_size": 8, "batch_size": 2, "seed_or_generator": 5}
            pairs = zip(training_batches(view, **slates), training_batches(whole, **slates), strict=True)
            for a, b in pairs:
                assert torch.equal(a.features, b.features) and torch.equal(a.rows, b.rows)
            for a, b in zip(evaluation_batches(view), evaluation_batches(whole), strict=True):
                assert torch.equal(a.features, b.features)
            sub = view.subset([2, 0])
            np.testing.assert_array_equal(np.asarray(sub.features), whole.subset([2, 0]).features)
    # A value the transform refuses is an error when the view is made, naming its line.
    wide = Dataset.from_arrays(np.array([[0.0], [1.0], [3e38]]), np.zeros(3), [1, 1, 2])
    fitted = Standardize().fit(wide.subset([0]))
    with pytest.raises(SmoothrankError, match=r"<arrays>:3: column 0 \(3e\+38\) standardises to"):
        transformed(fitted, wide)
    with pytest.raises(SmoothrankError, match="fit"):
        transformed(Standardize(), wide)
    with pytest.raises(SmoothrankError, match="Standardize: fitted on 4 features, the dataset has 1"):
        transformed(Standardize().fit(train), wide)
    with pytest.raises(SmoothrankError, match="SignedLog1p: features: column 3 is out of range for 1"):
        transformed(SignedLog1p([3]), wide)


def test_compose_fits_a_transform_of_ones_own_on_the_previous_outputs():
    class Double(Transform):  # not a built-in step: Compose.fit falls back to transform()
        def transform(self, dataset):
            return dataset.with_features(dataset.features * 2)

    train = _toy(seed=4)
    fitted = Compose([Double(), Standardize()]).fit(train)
    np.testing.assert_allclose(fitted.transforms[1].mean, train.features.astype(np.float64).mean(0) * 2)
    with pytest.raises(SmoothrankError, match="Double cannot be applied a batch at a time"):
        transformed(fitted, train)


# ----------------------------------------------------------------------------- writers
def test_predictions_trec_qrels(tmp_path):
    ds = _toy()
    scores = np.random.default_rng(3).normal(size=ds.n_docs)
    scores[1] = scores[0]  # a tie
    write_predictions(tmp_path / "p.txt", scores)
    np.testing.assert_array_equal(read_predictions(tmp_path / "p.txt", expected=ds.n_docs), scores)
    write_trec_run(tmp_path / "run.txt", ds, scores, tag="t")
    rows = [line.split() for line in (tmp_path / "run.txt").read_text().splitlines()]
    assert len(rows) == ds.n_docs and rows[0][1] == "Q0" and rows[0][5] == "t"
    first = [r for r in rows if r[0] == "0"]
    assert [int(r[3]) for r in first] == [1, 2, 3]
    assert [float(r[4]) for r in first] == sorted(scores[:3], reverse=True)
    write_qrels(tmp_path / "qrels.txt", ds)
    qrels = [line.split() for line in (tmp_path / "qrels.txt").read_text().splitlines()]
    assert qrels[0] == ["0", "0", "d0", str(int(ds.labels[0]))]
    import pytrec_eval  # an independent consumer of both files

    qrel = {}
    for q, _, d, rel in qrels:
        qrel.setdefault(q, {})[d] = int(rel)
    run = {}
    for q, _, d, _, s, _ in rows:
        run.setdefault(q, {})[d] = float(s)
    result = pytrec_eval.RelevanceEvaluator(qrel, {"ndcg"}).evaluate(run)
    assert set(result) == {"0", "1", "2", "3"}


def test_predictions_in_file_order_after_regroup(tmp_path):
    path = tmp_path / "d.txt"
    path.write_text("1 qid:a 1:1\n0 qid:b 1:2\n2 qid:a 1:3\n")
    ds = load_letor(path, regroup=True, cache=False)
    write_predictions(tmp_path / "p.txt", ds.features[:, 0], dataset=ds)
    np.testing.assert_array_equal(read_predictions(tmp_path / "p.txt"), [1, 2, 3])


def test_read_predictions_errors(tmp_path):
    path = tmp_path / "p.txt"
    path.write_text("1.5\r\n2\nabc\n")
    with pytest.raises(DataFormatError, match=r"p\.txt:3: the score is not a number"):
        read_predictions(path)
    path.write_text("1\ninf\n")
    with pytest.raises(DataFormatError, match=r"p\.txt:2: the score is not finite"):
        read_predictions(path)
    path.write_text("1\n\n2\n")
    with pytest.raises(DataFormatError, match=r"p\.txt:2: the score is empty"):
        read_predictions(path)
    path.write_text("1\n2\n")
    with pytest.raises(DataFormatError, match=r"p\.txt:3: expected 3 scores"):
        read_predictions(path, expected=3)
    with pytest.raises(SmoothrankError, match="not finite"):
        write_predictions(tmp_path / "q.txt", [1.0, float("nan")])
    assert not (tmp_path / "q.txt").exists() and not list(tmp_path.glob(".*tmp"))


def test_length_buckets_group_sorted_queries_within_both_limits():
    from smoothrank.data import length_buckets

    sizes = np.array([5, 1, 9, 3, 3, 40, 2])
    groups = list(length_buckets(sizes, max_items=12))
    assert sorted(q for g in groups for q in g) == list(range(7))  # every query once
    assert [[int(sizes[q]) for q in g] for g in groups] == [[1, 2, 3, 3], [5], [9], [40]]
    assert all(len(g) * max(sizes[g]) <= 12 or len(g) == 1 for g in groups)
    assert [len(g) for g in length_buckets(sizes, batch_size=2, max_items=1 << 16)] == [2, 2, 2, 1]
    with pytest.raises(SmoothrankError, match="max_items"):
        list(length_buckets(sizes, max_items=0))
