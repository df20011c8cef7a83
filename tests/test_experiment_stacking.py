"""Learned blends (smoothrank.experiments.stacking): the fit against an independent NumPy optimality
check, cross-fitting without leakage, degenerate input, spec validation, and end to end."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml
from conftest import assert_spec_problems, two_method_spec, write_synthetic_folds, zscore_loop
from scipy.optimize import minimize_scalar

from smoothrank.cli import main as cli_main
from smoothrank.errors import ConfigError, SmoothrankError
from smoothrank.experiments import fit_blend, fit_blend_weights, run_experiment, spec_from_dict
from smoothrank.experiments.ensemble import read_scores
from smoothrank.experiments.stacking import blend_features, cross_fit_blend, cross_fit_scores
from smoothrank.metrics import evaluate_flat, mean_metrics


def _queries(rng: np.random.Generator, n_queries: int, n_members: int, *, signal: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Member scores = signal[m] * label + noise, on queries of 1-12 documents with labels 0-2."""
    sizes = rng.integers(1, 13, size=n_queries)
    offsets = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    y = rng.integers(0, 3, size=offsets[-1]).astype(np.float64)
    x = signal[None, :] * y[:, None] + rng.normal(size=(offsets[-1], n_members))
    return x, y, offsets


def _listnet_numpy(w: np.ndarray, x: np.ndarray, y: np.ndarray, off: np.ndarray, l2: float
                   ) -> tuple[float, np.ndarray]:
    """ListNet (top-one) mean over the queries with a relevant document, + l2 |w|^2, and its gradient
    X^T (softmax(Xw) - softmax(y)) written out per query, independently of smoothrank.losses."""
    total, grad, n = 0.0, np.zeros_like(w), 0
    for q in range(off.size - 1):
        xq, yq = x[off[q]:off[q + 1]], y[off[q]:off[q + 1]]
        if not (yq > 0).any():
            continue
        s = xq @ w
        log_q = s - s.max() - np.log(np.exp(s - s.max()).sum())
        p = np.exp(yq - yq.max()) / np.exp(yq - yq.max()).sum()
        total += -(p * log_q).sum()
        grad += xq.T @ (np.exp(log_q) - p)
        n += 1
    n = max(n, 1)
    return total / n + l2 * (w @ w), grad / n + 2 * l2 * w


@pytest.mark.parametrize("seed", range(4))
def test_fit_is_optimal_by_an_independent_kkt_check(seed):
    rng = np.random.default_rng(seed)
    x, y, off = _queries(rng, 40, 4, signal=np.array([1.0, 0.4, 0.0, -0.3]))
    l2 = 1e-3
    w = fit_blend_weights(x, y, off, l2=l2)
    assert w.shape == (4,) and (w >= 0).all() and w.sum() == pytest.approx(1.0)
    # The raw optimum lies on the ray c * w: find c by a 1-D search, then check the KKT conditions of
    # min_{w >= 0}: zero gradient on the positive weights, a non-negative one on the zero weights.
    c = minimize_scalar(lambda t: _listnet_numpy(t * w, x, y, off, l2)[0], bounds=(1e-6, 1e3),
                        method="bounded", options={"xatol": 1e-10}).x
    _, grad = _listnet_numpy(c * w, x, y, off, l2)
    active = c * w > 1e-6
    assert np.abs(grad[active]).max() < 1e-4
    assert (grad[~active] > -1e-4).all()
    # The anti-correlated member gets no weight, the pure-noise one little, the strongest the most.
    assert w[3] < 1e-6 and w[0] == w.max() and w[0] > 0.6


def test_fit_is_deterministic_and_scale_free():
    rng = np.random.default_rng(5)
    x, y, off = _queries(rng, 30, 3, signal=np.array([1.0, 0.5, 0.2]))
    w = fit_blend_weights(x, y, off)
    assert np.array_equal(w, fit_blend_weights(x, y, off))
    # Without the ridge term, scaling the features scales the raw optimum: normalised weights stay.
    w0 = fit_blend_weights(x, y, off, l2=0.0)
    assert fit_blend_weights(3.0 * x, y, off, l2=0.0) == pytest.approx(w0, abs=1e-4)


def test_other_losses_fit_too():
    rng = np.random.default_rng(2)
    x, y, off = _queries(rng, 30, 3, signal=np.array([1.0, 0.0, 0.0]))
    for loss, options in [("rank_net", {}), ("list_mle", {"generator": 0}), ("neural_ndcg", {"k": 5})]:
        w = fit_blend_weights(x, y, off, loss=loss, options=options)
        assert np.isfinite(w).all() and w.sum() == pytest.approx(1.0)
        assert w[0] == w.max(), loss


def test_degenerate_queries_give_finite_weights():
    # one-document queries, a constant (all-zero) member, ties, queries without a relevant document
    x = np.array([[1.0, 0.0, 2.0], [0.5, 0.0, 2.0], [-1.0, 0.0, 2.0], [7.0, 0.0, 1.0], [0.0, 0.0, 0.0],
                  [1e6, 0.0, -1e6], [-1e6, 0.0, 1e6]])
    y = np.array([2.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0])
    off = np.array([0, 3, 4, 5, 7])
    w = fit_blend_weights(x, y, off)
    assert np.isfinite(w).all() and (w >= 0).all() and w.sum() == pytest.approx(1.0)
    # Nothing to learn (no query has a relevant document): the equal weights.
    assert fit_blend_weights(x, np.zeros(7), off) == pytest.approx(np.full(3, 1 / 3))


def test_cross_fitting_never_sees_the_scored_queries():
    rng = np.random.default_rng(3)
    x, y, off = _queries(rng, 23, 3, signal=np.array([1.0, 0.3, 0.1]))
    scores, weights = cross_fit_scores(x, y, off, cv=4)
    assert weights.shape == (4, 3) and scores.shape == (off[-1],)
    part0 = np.concatenate([np.arange(off[q], off[q + 1]) for q in range(0, 23, 4)])
    # Relabel part 0's queries: part 0's scores (fit on the other parts) are unchanged, bit for bit.
    y2 = y.copy()
    y2[part0] = rng.integers(0, 3, size=part0.size)
    scores2, weights2 = cross_fit_scores(x, y2, off, cv=4)
    assert np.array_equal(scores2[part0], scores[part0]) and np.array_equal(weights2[0], weights[0])
    assert not np.array_equal(weights2[1], weights[1])  # the other parts did train on them
    # Each part is scored by the weights of its own fit.
    assert scores[part0] == pytest.approx(x[part0] @ weights[0])
    # cv above the number of queries is lowered to it.
    assert cross_fit_scores(x[:off[3]], y[:off[3]], off[:4], cv=10)[1].shape == (3, 3)


def test_fit_reports_convergence():
    rng = np.random.default_rng(8)
    x, y, off = _queries(rng, 40, 4, signal=np.array([1.0, 0.6, 0.3, 0.0]))
    fit = fit_blend(x, y, off)
    assert fit.converged and not fit.fallback and 1 <= fit.iterations < 500
    assert np.array_equal(fit.weights, fit_blend_weights(x, y, off))
    # Stopped after one iteration: not converged, and SciPy's reason is kept.
    short = fit_blend(x, y, off, max_iter=1)
    assert not short.converged and short.iterations == 1 and "ITERATIONS" in short.message.upper()
    assert short.summary() == {"converged": False, "iterations": 1, "message": short.message,
                               "fallback": False}
    nothing = fit_blend(x, np.zeros_like(y), off)  # no relevant document: the equal weights
    assert nothing.fallback and nothing.weights == pytest.approx(np.full(4, 0.25))
    _, fits = cross_fit_blend(x, y, off, cv=3)
    assert len(fits) == 3 and all(f.converged for f in fits)


def test_summary_flags_a_fit_that_did_not_converge():
    from smoothrank.experiments.report import format_markdown

    learner = {"loss": "list_net", "l2": 1e-3, "cv": 5}
    row = {"dataset": "d", "method": "stack", "kind": "ensemble", "split": "test", "metric": "ndcg@1",
           "mean": 0.5, "std": 0.0, "n_folds": 1, "significant": 0, "blend_of": ["a", "b"],
           "blend_learner": learner, "blend_weights": {"a": 0.5, "b": 0.5},
           "blend_fits": [{"converged": True}, {"converged": False, "message": "STOP: ITERATIONS"}]}

    def markdown() -> str:
        return format_markdown([row], metrics=["ndcg@1"], title="t", convention="letor4", baseline=None,
                               alpha=0.05)

    assert "**1 of its 2 weight fits did not converge** (L-BFGS-B: STOP: ITERATIONS)" in markdown()
    row["blend_fits"] = [{"converged": True}]
    text = markdown()
    assert "did not converge" not in text


def test_blend_features_per_normalization():
    off = np.array([0, 3, 5])
    a, b = np.array([3.0, 1.0, 2.0, 5.0, 5.0]), np.array([30.0, 20.0, 10.0, 1.0, 2.0])
    z = blend_features([[a, b]], off)[:, 0]  # one method, two seed runs: its seed ensemble, z-scored
    assert z == pytest.approx(zscore_loop(zscore_loop(a, off) + zscore_loop(b, off), off))
    r = blend_features([[a], [b]], off, normalize="rank")
    assert r[:, 0].tolist() == [1.0, 0.0, 0.5, 0.5, 0.5] and r[:, 1].tolist() == [1.0, 0.5, 0.0, 0.0, 1.0]
    assert blend_features([[a], [b]], off, normalize="none") == pytest.approx(np.stack([a, b], axis=1))
    with pytest.raises(SmoothrankError, match=r"member method 1: .*non-finite"):
        blend_features([[a], [np.r_[b[:4], np.inf]]], off)


@pytest.mark.parametrize(("call", "fragment"), [
    (lambda x, y, o: fit_blend_weights(x[:, 0], y, o), "features: expected shape (n_docs, n_members)"),
    (lambda x, y, o: fit_blend_weights(x, y[:-1], o), "labels: expected shape"),
    (lambda x, y, o: fit_blend_weights(x, y, o[:-1]), "offsets"),
    (lambda x, y, o: fit_blend_weights(x, y, o, l2=-1.0), "l2: expected a finite number >= 0"),
    (lambda x, y, o: fit_blend(x, y, o, max_iter=0), "max_iter: expected an integer >= 1"),
    (lambda x, y, o: fit_blend_weights(np.where(x > 1, np.nan, x), y, o), "non-finite"),
    (lambda x, y, o: cross_fit_scores(x, y, o, cv=1), "cv: expected an integer >= 2"),
    (lambda x, y, o: fit_blend_weights(x, y, o, loss="nope"), "unknown loss 'nope'"),
    (lambda x, y, o: fit_blend_weights(x, y, o, options={"temprature": 1}), "unknown option(s) temprature"),
])
def test_bad_input_is_a_clear_error(call, fragment):
    x, y, off = _queries(np.random.default_rng(0), 6, 2, signal=np.array([1.0, 0.0]))
    with pytest.raises(SmoothrankError) as info:
        call(x, y, off)
    assert fragment in str(info.value)


# ------------------------------------------------------------------------------ in an experiment
@pytest.fixture(scope="module")
def letor_files(tmp_path_factory):
    return write_synthetic_folds(tmp_path_factory.mktemp("letor_stack"), seed=11, queries=(12, 9, 6),
                                 docs=8, n_features=4, noise=0.5)


_MEMBERS = ["neural_ndcg-linear", "lightgbm-lambdarank"]


def _spec(root, **extra) -> dict:
    learned = {"label": "stack", "members": _MEMBERS, "weights": "learned", "learner": {"cv": 3}}
    return two_method_spec(root, **{"name": "tiny_stack", "baseline": "stack", "blends": [learned], **extra})


@pytest.mark.parametrize(("patch", "fragments"), [
    ({"blends": [{"label": "b", "members": _MEMBERS, "learner": {"cv": 3}}]},
     ["blends.0.learner: only with weights: learned"]),
    ({"blends": [{"label": "b", "members": _MEMBERS, "weights": "learned", "learner": {"loss": "nope"}}]},
     ["blends.0.learner", "unknown loss 'nope'"]),
    ({"blends": [{"label": "b", "members": _MEMBERS, "weights": "learned", "learner": {"cv": 1}}]},
     ["blends.0.learner.cv"]),
    ({"blends": [{"label": "b", "members": _MEMBERS, "weights": "learned", "learner": {"l2": -1}}]},
     ["blends.0.learner.l2"]),
    ({"blends": [{"label": "b", "members": _MEMBERS, "weights": "mean"}]}, ["blends.0.weights"]),
])
def test_spec_learned_blend_errors(letor_files, patch, fragments):
    assert_spec_problems(_spec(letor_files, **patch), fragments, source="stack.yaml")


def test_spec_learned_blend_needs_a_validation_split(letor_files):
    data = _spec(letor_files)
    del data["datasets"][0]["valid"]
    for g in data["gbdt"]:
        g["early_stopping_rounds"] = None
    with pytest.raises(ConfigError, match="every dataset needs one"):
        spec_from_dict(data, source="stack.yaml")


def test_end_to_end_learned_blend(letor_files, tmp_path, capsys):
    from smoothrank.data import load_letor

    spec_path = tmp_path / "stack.yaml"
    spec_path.write_text(yaml.safe_dump(_spec(letor_files)))
    out = tmp_path / "out"
    assert cli_main(["experiment", str(spec_path), "--out", str(out), "--quiet"]) == 0
    assert "1 ensemble(s) built" in capsys.readouterr().out
    result = json.loads((out / "ensembles" / "syn--files--stack" / "result.json").read_text())
    learned = result["ensemble"]["learned_weights"]
    assert list(learned) == _MEMBERS and sum(learned.values()) == pytest.approx(1.0)
    assert result["ensemble"]["learner"] == {"loss": "list_net", "options": {}, "l2": 1e-3, "cv": 3}
    assert np.array(result["ensemble"]["cross_fit_weights"]).shape == (3, 2)
    assert result["ensemble"]["fit"]["converged"] and len(result["ensemble"]["cross_fits"]) == 3

    # Independent recomputation from the member runs' stored scores.
    def features(split: str, ds) -> np.ndarray:
        cols = []
        for method in _MEMBERS:
            runs = [read_scores(out / "runs" / f"syn--files--{method}--seed{s}" / "scores.npz")[split]
                    for s in (0, 1)]
            seed_mean = np.mean([zscore_loop(r, ds.offsets) for r in runs], axis=0)
            cols.append(zscore_loop(seed_mean, ds.offsets))
        return np.stack(cols, axis=1)

    valid = load_letor(letor_files / "vali.txt", n_features=4)
    test = load_letor(letor_files / "test.txt", n_features=4)
    x_valid = features("valid", valid)
    assert blend_features([[read_scores(out / "runs" / f"syn--files--{m}--seed{s}" / "scores.npz")["valid"]
                            for s in (0, 1)] for m in _MEMBERS], valid.offsets) == pytest.approx(x_valid)
    w = fit_blend_weights(x_valid, valid.labels, valid.offsets)
    assert list(learned.values()) == pytest.approx(w.tolist())
    metrics = list(result["metrics"]["test"])
    want = mean_metrics(evaluate_flat(features("test", test) @ w, test.labels, offsets=test.offsets,
                                      metrics=metrics, convention="letor4"))
    assert result["metrics"]["test"] == pytest.approx(want, abs=1e-12)
    cross_fitted, _ = cross_fit_scores(x_valid, valid.labels, valid.offsets, cv=3)
    want_valid = mean_metrics(evaluate_flat(cross_fitted, valid.labels, offsets=valid.offsets,
                                            metrics=metrics, convention="letor4"))
    assert result["metrics"]["valid"] == pytest.approx(want_valid, abs=1e-12)

    summary = (out / "summary.md").read_text()
    assert "`stack`: a learned blend of `neural_ndcg-linear`, `lightgbm-lambdarank`" in summary
    assert "Mean weights over the folds: `neural_ndcg-linear`" in summary
    # Resumable; another learner setting rebuilds it (no run is redone).
    assert run_experiment(spec_from_dict(_spec(letor_files)), out).ensembles_reused == ["syn--files--stack"]
    other = _spec(letor_files, blends=[{"label": "stack", "members": _MEMBERS, "weights": "learned",
                                        "learner": {"cv": 3, "l2": 0.1}}])
    outcome = run_experiment(spec_from_dict(other), out)
    assert outcome.ensembles_built == ["syn--files--stack"] and outcome.ran == []


def test_a_learned_blend_with_a_loss_that_draws_is_reproducible():
    # ListMLE breaks label ties at random: with a fresh draw per evaluation the L-BFGS-B objective
    # moved under it and two fits disagreed (a review found it). It now draws from generator 0.
    rng = np.random.default_rng(0)
    features, labels = rng.normal(size=(60, 3)), rng.integers(0, 2, 60).astype(float)
    offsets = np.arange(0, 61, 6)
    first = fit_blend(features, labels, offsets, loss="list_mle")
    second = fit_blend(features, labels, offsets, loss="list_mle")
    np.testing.assert_array_equal(first.weights, second.weights)
    seeded = fit_blend(features, labels, offsets, loss="list_mle", options={"generator": 0})
    np.testing.assert_array_equal(first.weights, seeded.weights)
