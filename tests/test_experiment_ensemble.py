"""Seed ensembles: combine_scores maths, spec options, end-to-end runner/report behaviour."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import assert_spec_problems, two_method_spec, write_synthetic_folds, zscore_loop
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import rankdata

from smoothrank.cli import main as cli_main
from smoothrank.errors import ConfigError, SmoothrankError
from smoothrank.experiments import combine_scores, expand, run_experiment, spec_from_dict
from smoothrank.experiments.ensemble import normalize_scores, read_scores
from smoothrank.metrics import evaluate_flat, mean_metrics

S32 = math.sqrt(1.5)


# ------------------------------------------------------------------------------ the maths
def test_combine_scores_hand_computation():
    offsets = np.array([0, 3, 5])
    a = np.array([1.0, 2.0, 3.0, 0.0, 4.0])
    b = np.array([10.0, 30.0, 20.0, 5.0, 5.0])  # second query constant: no preference
    # zscore: [1, 2, 3] -> (s - 2) / sqrt(2/3) = [-sqrt(3/2), 0, sqrt(3/2)]; [10, 30, 20] likewise permuted;
    # [0, 4] -> [-1, 1]; the constant [5, 5] -> [0, 0].
    expected = np.array([(-S32 - S32) / 2, (0 + S32) / 2, (S32 + 0) / 2, -0.5, 0.5])
    np.testing.assert_allclose(combine_scores([a, b], offsets), expected, rtol=1e-12, atol=1e-15)
    # rank: (R - 1) / (n - 1), ties averaged: [0, .5, 1] and [0, 1, .5]; [0, 1] and [.5, .5].
    np.testing.assert_allclose(combine_scores([a, b], offsets, normalize="rank"),
                               [0.0, 0.75, 0.75, 0.25, 0.75], rtol=0, atol=1e-15)
    np.testing.assert_allclose(combine_scores([a, b], offsets, normalize="none"), (a + b) / 2)


def _random_queries(rng: np.random.Generator, n_queries: int, ties: bool) -> tuple[np.ndarray, np.ndarray]:
    sizes = rng.integers(0, 9, size=n_queries)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    scores = rng.integers(-3, 4, size=offsets[-1]).astype(float) if ties else rng.normal(size=offsets[-1])
    return scores, offsets


@pytest.mark.parametrize("seed", range(5))
def test_normalizations_match_a_per_query_loop(seed):
    rng = np.random.default_rng(seed)
    s, offsets = _random_queries(rng, 30, ties=seed % 2 == 0)
    z = normalize_scores(s, offsets, normalize="zscore")
    r = normalize_scores(s, offsets, normalize="rank")
    for q in range(len(offsets) - 1):
        part = s[offsets[q]:offsets[q + 1]]
        sl = slice(offsets[q], offsets[q + 1])
        if part.size == 0:
            continue
        if np.ptp(part) == 0:
            np.testing.assert_array_equal(z[sl], 0.0)
        else:
            np.testing.assert_allclose(z[sl], (part - part.mean()) / part.std(), rtol=1e-12, atol=1e-12)
        want = (rankdata(part) - 1) / (part.size - 1) if part.size > 1 else np.array([0.5])
        np.testing.assert_allclose(r[sl], want, rtol=0, atol=1e-15)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from(["zscore", "rank"]))
def test_per_query_shift_and_scale_invariance(seed, normalize):
    rng = np.random.default_rng(seed)
    s, offsets = _random_queries(rng, 12, ties=seed % 3 == 0)
    sizes = np.diff(offsets)
    scale = np.repeat(10.0 ** rng.uniform(-2, 2, size=sizes.size), sizes)
    shift = np.repeat(rng.uniform(-100, 100, size=sizes.size), sizes)
    others = [rng.normal(size=s.size) for _ in range(2)]
    before = combine_scores([s, *others], offsets, normalize=normalize)
    after = combine_scores([s * scale + shift, *others], offsets, normalize=normalize)
    np.testing.assert_allclose(after, before, rtol=1e-9, atol=1e-9)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from(["zscore", "rank"]))
def test_single_member_keeps_the_ranking(seed, normalize):
    rng = np.random.default_rng(seed)
    s, offsets = _random_queries(rng, 10, ties=seed % 2 == 0)
    e = combine_scores([s], offsets, normalize=normalize)
    for q in range(len(offsets) - 1):
        part, got = s[offsets[q]:offsets[q + 1]], e[offsets[q]:offsets[q + 1]]
        # Every pair keeps its order, ties stay ties.
        np.testing.assert_array_equal(np.sign(part[:, None] - part[None, :]),
                                      np.sign(got[:, None] - got[None, :]))


def test_offsets_without_padding_and_query_order():
    # Queries of 0, 1, 3 and 2 documents; permuting the queries permutes the results and nothing else.
    rng = np.random.default_rng(3)
    blocks = [np.empty(0), np.array([7.0]), rng.normal(size=3), rng.normal(size=2)]
    runs = [[b * (m + 1) + rng.normal(size=b.size) for b in blocks] for m in range(3)]
    offsets = np.concatenate([[0], np.cumsum([b.size for b in blocks])])
    whole = combine_scores([np.concatenate(r) for r in runs], offsets)
    order = [3, 0, 2, 1]
    permuted_offsets = np.concatenate([[0], np.cumsum([blocks[i].size for i in order])])
    permuted = combine_scores([np.concatenate([r[i] for i in order]) for r in runs], permuted_offsets)
    pieces = {i: permuted[permuted_offsets[k]:permuted_offsets[k + 1]] for k, i in enumerate(order)}
    np.testing.assert_allclose(np.concatenate([pieces[i] for i in range(4)]), whole, rtol=1e-12)
    assert whole[0] == 0.0  # the one-document query has no preference under zscore


@pytest.mark.parametrize("normalize", ["zscore", "rank", "none"])
def test_degenerate_queries_stay_finite(normalize):
    offsets = np.array([0, 3, 6, 9, 10, 12])
    s = np.array([2.0, 2.0, 2.0,            # constant
                  1e300, -1e300, 5e299,     # huge
                  1e-300, 3e-300, 2e-300,   # tiny
                  4.0,                      # one document
                  0.1 * 3, 0.3])            # equal up to rounding
    out = combine_scores([s, -s], offsets, normalize=normalize)
    assert np.isfinite(out).all()
    if normalize == "zscore":
        z = normalize_scores(s, offsets)
        np.testing.assert_array_equal(z[[0, 1, 2, 9, 10, 11]], 0.0)
        np.testing.assert_allclose(z[6:9], [-S32, S32, 0.0], rtol=1e-12)  # tiny scores standardised exactly
        assert z[3] > z[5] > 0 > z[4]


def test_combine_scores_rejects_bad_input():
    off = np.array([0, 2, 3])
    ok = np.array([1.0, 2.0, 3.0])
    with pytest.raises(SmoothrankError, match=r"score_arrays\[1\]: scores: 1 non-finite"):
        combine_scores([ok, np.array([1.0, np.nan, 3.0])], off)
    with pytest.raises(SmoothrankError, match=r"score_arrays\[1\]: shape"):
        combine_scores([ok, ok[:2]], off)
    with pytest.raises(SmoothrankError, match="offsets"):
        combine_scores([ok], np.array([0, 2, 4]))
    with pytest.raises(SmoothrankError, match="offsets"):
        combine_scores([ok], np.array([0.0, 3.0]))
    with pytest.raises(SmoothrankError, match="normalize"):
        combine_scores([ok], off, normalize="minmax")
    with pytest.raises(SmoothrankError, match="at least one"):
        combine_scores([], off)
    with pytest.raises(SmoothrankError, match="sequence"):
        combine_scores(ok, off)


# ------------------------------------------------------------------------------ spec
@pytest.fixture(scope="module")
def letor_files(tmp_path_factory) -> Path:
    return write_synthetic_folds(tmp_path_factory.mktemp("letor_ens"), seed=7, queries=(12, 6, 6), docs=8,
                                 n_features=4, noise=0.5)


def _spec(root: Path, **extra) -> dict:
    return two_method_spec(root, **{"name": "tiny_ens", "ensemble": True,
                                    "baseline": "neural_ndcg-linear+ens2", **extra})


@pytest.mark.parametrize(("patch", "fragments"), [
    ({"seeds": [3]}, ["ensemble: a seed ensemble needs at least 2 distinct seeds, got seeds: [3]"]),
    ({"seeds": [1, 1]}, ["ensemble: a seed ensemble needs at least 2 distinct seeds"]),
    ({"ensemble_normalize": "minmax"}, ["ensemble_normalize: expected zscore, rank or none, got 'minmax'"]),
    # Every problem at once.
    ({"seeds": [0], "ensemble_normalize": "minmax", "baseline": "nope"},
     ["2 distinct seeds", "ensemble_normalize", "baseline: 'nope'"]),
    # An ensemble is a method only when ensembles are on (and with this many seeds).
    ({"ensemble": False}, ["baseline: 'neural_ndcg-linear+ens2' is not a method"]),
    ({"seeds": [0, 1, 2]}, ["baseline: 'neural_ndcg-linear+ens2' is not a method"]),
    ({"models": [{"label": "lin", "kind": "linear"}, {"label": "lin+ens2", "kind": "linear"}],
      "baseline": None}, ["'neural_ndcg-lin+ens2' is used twice"]),
])
def test_spec_ensemble_errors(letor_files, patch, fragments):
    assert_spec_problems(_spec(letor_files, **patch), fragments, source="ens.yaml")


def test_ensemble_option_leaves_cells_unchanged(letor_files):
    # Runs finished without the option stay valid with it: same run ids, settings, fingerprints.
    on = expand(spec_from_dict(_spec(letor_files, ensemble_normalize="rank")))
    off = expand(spec_from_dict(_spec(letor_files, ensemble=False, baseline=None)))
    assert [c.model_dump() for c in on] == [c.model_dump() for c in off]
    assert [c.fingerprint() for c in on] == [c.fingerprint() for c in off]
    spec = spec_from_dict(_spec(letor_files, baseline="lightgbm-lambdarank+ens2"))
    assert spec.ensemble_labels() == ["neural_ndcg-linear+ens2", "lightgbm-lambdarank+ens2"]


# ------------------------------------------------------------------------------ end to end
def test_end_to_end_ensemble(letor_files, tmp_path, capsys):
    from smoothrank.data import load_letor

    spec_path = tmp_path / "ens.yaml"
    spec_path.write_text(yaml.safe_dump(_spec(letor_files)))
    out = tmp_path / "out"
    # Before any run, a dry run says each ensemble waits for its members.
    assert cli_main(["experiment", str(spec_path), "--out", str(out), "--dry-run"]) == 0
    assert "syn--files--lightgbm-lambdarank+ens2\tensemble, to build (after 2 of its 2 member runs)" in \
        capsys.readouterr().out
    assert cli_main(["experiment", str(spec_path), "--out", str(out), "--quiet"]) == 0
    assert "4 run(s) done, 0 skipped (finished before); 2 ensemble(s) built, 0 reused" in \
        capsys.readouterr().out
    # The folder's plan lists the ensembles too, so `compare` reads them as methods of the experiment.
    assert json.loads((out / "plan.json").read_text())["ensembles"] == [
        "syn--files--neural_ndcg-linear+ens2", "syn--files--lightgbm-lambdarank+ens2"]
    compare = ["compare", str(out), "neural_ndcg-linear+ens2", "neural_ndcg-linear", "--format", "json"]
    assert cli_main(compare) == 0
    assert json.loads(capsys.readouterr().out)["map"]["n_queries"] == 6

    neural_ids = [f"syn--files--neural_ndcg-linear--seed{s}" for s in (0, 1)]
    ens_dir = out / "ensembles" / "syn--files--neural_ndcg-linear+ens2"
    test = load_letor(letor_files / "test.txt", n_features=4)
    member_scores = []
    for run_id in neural_ids:
        scores = read_scores(out / "runs" / run_id / "scores.npz")
        assert {k: v.shape for k, v in scores.items()} == {"train": (96,), "valid": (48,), "test": (48,)}
        stored = json.loads((out / "runs" / run_id / "result.json").read_text())
        # scores.npz holds the selected model's scores: they reproduce the run's test metrics.
        again = mean_metrics(evaluate_flat(scores["test"], test.labels, offsets=test.offsets,
                                           metrics=stored["metrics"]["test"], convention="letor4"))
        assert again == pytest.approx(stored["metrics"]["test"], abs=1e-12)
        member_scores.append(scores["test"])
    # The two seeds really differ (else the test below would prove little).
    assert not np.allclose(member_scores[0], member_scores[1])

    # Independent recomputation: z-score per query in a loop, mean of the two, evaluate_flat.
    combined = (zscore_loop(member_scores[0], test.offsets)
                + zscore_loop(member_scores[1], test.offsets)) / 2
    result = json.loads((ens_dir / "result.json").read_text())
    metrics = result["metrics"]["test"]
    want = mean_metrics(evaluate_flat(combined, test.labels, offsets=test.offsets, metrics=list(metrics),
                                      convention="letor4"))
    assert metrics == pytest.approx(want, abs=1e-12)
    # ... and it is not simply one of its members.
    members_map = [json.loads((out / "runs" / i / "result.json").read_text())["metrics"]["test"]["map"]
                   for i in neural_ids]
    assert all(abs(metrics["map"] - m) > 1e-6 for m in members_map)
    assert result["kind"] == "ensemble" and result["ensemble"]["members"] == neural_ids
    assert set(result["metrics"]) == {"train", "valid", "test"} and len(result["per_query"]["qids"]) == 6

    rows = list(csv.DictReader((out / "summary.csv").open()))
    assert list(dict.fromkeys(r["method"] for r in rows)) == [
        "neural_ndcg-linear", "neural_ndcg-linear+ens2", "lightgbm-lambdarank", "lightgbm-lambdarank+ens2"]
    ens_row = next(r for r in rows if r["method"] == "neural_ndcg-linear+ens2" and r["split"] == "test"
                   and r["metric"] == "map")
    assert ens_row["kind"] == "ensemble" and ens_row["n_runs"] == "1"
    assert float(ens_row["mean"]) == pytest.approx(want["map"], abs=1e-5)
    # The ensemble is the t-test baseline of every other method.
    single = next(r for r in rows if r["method"] == "neural_ndcg-linear" and r["split"] == "test"
                  and r["metric"] == "map")
    assert single["baseline"] == "neural_ndcg-linear+ens2" and single["n_queries"] == "6"
    assert "| neural_ndcg-linear+ens2 |" in (out / "summary.md").read_text()

    # Re-running skips everything: no run, no ensemble rewritten.
    mtimes = {p: p.stat().st_mtime_ns for p in out.glob("*/*/*.*")}
    assert cli_main(["experiment", str(spec_path), "--out", str(out), "--quiet"]) == 0
    assert "0 run(s) done, 4 skipped (finished before); 0 ensemble(s) built, 2 reused" in \
        capsys.readouterr().out
    assert {p: p.stat().st_mtime_ns for p in out.glob("*/*/*.*")} == mtimes
    assert cli_main(["experiment", str(spec_path), "--out", str(out), "--dry-run"]) == 0
    assert "syn--files--lightgbm-lambdarank+ens2\tensemble, built" in capsys.readouterr().out
    # Another normalisation: every ensemble would be rebuilt, and the dry run says so.
    other = tmp_path / "ens_rank.yaml"
    other.write_text(yaml.safe_dump(_spec(letor_files, ensemble_normalize="rank")))
    assert cli_main(["experiment", str(other), "--out", str(out), "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert printed.count("ensemble, to rebuild (its settings or members changed)") == 2, printed

    spec = spec_from_dict(_spec(letor_files))
    # A member changed: its ensemble is rebuilt (and only it).
    member = out / "runs" / neural_ids[1] / "scores.npz"
    original = read_scores(member)
    from smoothrank.experiments.ensemble import write_scores

    write_scores(member, {k: -v for k, v in original.items()})
    outcome = run_experiment(spec, out)
    assert outcome.ran == [] and outcome.ensembles_built == ["syn--files--neural_ndcg-linear+ens2"]
    write_scores(member, original)
    assert run_experiment(spec, out).ensembles_built == ["syn--files--neural_ndcg-linear+ens2"]
    assert json.loads((ens_dir / "result.json").read_text())["metrics"] == result["metrics"]

    # A neural run made before scores.npz existed is re-scored from its saved model, identically.
    (out / "runs" / neural_ids[0] / "scores.npz").unlink()
    outcome = run_experiment(spec, out)
    assert outcome.ensembles_built == [] and len(outcome.ensembles_reused) == 2
    np.testing.assert_array_equal(read_scores(out / "runs" / neural_ids[0] / "scores.npz")["test"],
                                  member_scores[0])
    # Another normalisation: every ensemble is rebuilt, with per-query normalised ranks.
    rank_spec = spec_from_dict(_spec(letor_files, ensemble_normalize="rank"))
    assert len(run_experiment(rank_spec, out).ensembles_built) == 2

    def ranks(s: np.ndarray) -> np.ndarray:
        return np.concatenate([(rankdata(s[a:b]) - 1) / (b - a - 1)
                               for a, b in zip(test.offsets[:-1], test.offsets[1:], strict=True)])

    want = mean_metrics(evaluate_flat((ranks(member_scores[0]) + ranks(member_scores[1])) / 2, test.labels,
                                      offsets=test.offsets, metrics=list(metrics), convention="letor4"))
    rank_result = json.loads((ens_dir / "result.json").read_text())
    assert rank_result["ensemble"]["normalize"] == "rank"
    assert rank_result["metrics"]["test"] == pytest.approx(want, abs=1e-12)
    # A GBDT run without scores cannot be re-scored: a clear error naming the run folder.
    gbdt_run = out / "runs" / "syn--files--lightgbm-lambdarank--seed1"
    (gbdt_run / "scores.npz").unlink()
    outcome = run_experiment(spec, out)
    message = outcome.failed["syn--files--lightgbm-lambdarank+ens2"]
    assert str(gbdt_run) in message and "delete it to redo the run" in message
    assert [r["method"] for r in outcome.results].count("neural_ndcg-linear+ens2") == 1
    assert cli_main(["experiment", str(spec_path), "--out", str(out), "--quiet"]) == 1
    assert "lightgbm-lambdarank+ens2" in capsys.readouterr().err


# ------------------------------------------------------------------------------ blends
def test_weighted_combination_hand_computation():
    off = np.array([0, 3])
    a, b = np.array([1.0, 2.0, 3.0]), np.array([0.0, 0.0, 9.0])
    za, zb = zscore_loop(a, off), zscore_loop(b, off)
    np.testing.assert_allclose(combine_scores([a, b], off, weights=[3.0, 1.0]), 0.75 * za + 0.25 * zb)
    np.testing.assert_allclose(combine_scores([a, b], off, weights=[0.5, 0.5]), combine_scores([a, b], off))
    # A zero weight drops a run; weights are divided by their sum.
    np.testing.assert_allclose(combine_scores([a, b], off, weights=[0.0, 7.0]), zb)
    for bad, fragment in [([1.0], "one weight per run"), ([1.0, -1.0], "non-negative"),
                          ([0.0, 0.0], "not all zero"), ([1.0, np.nan], "finite")]:
        with pytest.raises(SmoothrankError, match=fragment):
            combine_scores([a, b], off, weights=bad)


_BLEND = {"label": "blend", "members": ["neural_ndcg-linear", "lightgbm-lambdarank"]}


@pytest.mark.parametrize(("patch", "fragments"), [
    ({"blends": [{"label": "b", "members": ["neural_ndcg-linear", "nope"]}]},
     ["blends.0.members: ['nope'] not method(s) of the grid"]),
    # Seed ensembles are not members: a blend weighs methods, whose seed runs it already averages.
    ({"blends": [{"label": "b", "members": ["neural_ndcg-linear", "neural_ndcg-linear+ens2"]}]},
     ["blends.0.members: ['neural_ndcg-linear+ens2'] not method(s)"]),
    ({"blends": [{"label": "b", "members": ["neural_ndcg-linear", "neural_ndcg-linear"]}]},
     ["blends.0.members: ['neural_ndcg-linear'] listed twice"]),
    ({"blends": [{"label": "b", "members": ["neural_ndcg-linear"]}]}, ["blends.0.members", "at least 2"]),
    ({"blends": [{**_BLEND, "label": "lightgbm-lambdarank"}]},
     ["method label 'lightgbm-lambdarank' is used twice"]),
    ({"blends": [{**_BLEND, "normalize": "minmax"}]}, ["blends.0.normalize"]),
])
def test_spec_blend_errors(letor_files, patch, fragments):
    assert_spec_problems(_spec(letor_files, **patch), fragments, source="ens.yaml")


def test_end_to_end_blend(letor_files, tmp_path, capsys):
    from smoothrank.data import load_letor

    # Blends without seed ensembles; the blend is the t-test baseline.
    data = _spec(letor_files, ensemble=False, baseline="blend", blends=[_BLEND])
    spec_path = tmp_path / "blend.yaml"
    spec_path.write_text(yaml.safe_dump(data))
    out = tmp_path / "out"
    assert cli_main(["experiment", str(spec_path), "--out", str(out), "--quiet"]) == 0
    assert "4 run(s) done, 0 skipped (finished before); 1 ensemble(s) built, 0 reused" in \
        capsys.readouterr().out
    test = load_letor(letor_files / "test.txt", n_features=4)
    ids = [f"syn--files--{m}--seed{s}" for m in ("neural_ndcg-linear", "lightgbm-lambdarank") for s in (0, 1)]
    runs = [read_scores(out / "runs" / i / "scores.npz")["test"] for i in ids]
    # Independent recomputation: each method's seeds averaged, then the two methods averaged.
    z = [zscore_loop(s, test.offsets) for s in runs]
    combined = ((z[0] + z[1]) / 2 + (z[2] + z[3]) / 2) / 2
    result = json.loads((out / "ensembles" / "syn--files--blend" / "result.json").read_text())
    want = mean_metrics(evaluate_flat(combined, test.labels, offsets=test.offsets,
                                      metrics=list(result["metrics"]["test"]), convention="letor4"))
    assert result["metrics"]["test"] == pytest.approx(want, abs=1e-12)
    assert result["ensemble"]["of"] == _BLEND["members"] and result["ensemble"]["members"] == ids
    assert result["ensemble"]["weights"] == pytest.approx([0.25] * 4)
    rows = list(csv.DictReader((out / "summary.csv").open()))
    assert list(dict.fromkeys(r["method"] for r in rows)) == ["neural_ndcg-linear", "lightgbm-lambdarank",
                                                              "blend"]
    gbdt = next(r for r in rows if r["method"] == "lightgbm-lambdarank" and r["split"] == "test"
                and r["metric"] == "map")
    assert gbdt["baseline"] == "blend" and gbdt["n_queries"] == "6"
    summary = (out / "summary.md").read_text()
    assert "| blend |" in summary
    assert "`blend`: a blend of `neural_ndcg-linear`, `lightgbm-lambdarank`" in summary
    assert "the mean of the members' per-query standardised scores" in summary
    # Resumable like a seed ensemble; a dry run lists it.
    assert run_experiment(spec_from_dict(data), out).ensembles_reused == ["syn--files--blend"]
    assert cli_main(["experiment", str(spec_path), "--out", str(out), "--dry-run"]) == 0
    assert "syn--files--blend\tensemble, built" in capsys.readouterr().out


def test_loss_restricted_to_some_models(letor_files):
    models = [{"label": "linear", "kind": "linear"}, {"label": "mlp", "kind": "mlp", "hidden": [4]}]
    losses = ["neural_ndcg",
              {"name": "list_mle", "models": ["linear"], "overrides": {"optimizer": {"lr": 0.01}}},
              {"name": "list_mle", "models": ["mlp"]}]
    neural = {**_spec(letor_files)["neural"], "optimizer": {"name": "adam", "lr": 0.002}}
    spec = spec_from_dict(_spec(letor_files, models=models, losses=losses, ensemble=False, baseline=None,
                                neural=neural))
    assert spec.method_labels() == ["neural_ndcg-linear", "neural_ndcg-mlp", "list_mle-linear",
                                    "list_mle-mlp", "lightgbm-lambdarank"]
    lr = {c.method: c.settings["config"]["optimizer"]["lr"] for c in expand(spec) if c.kind == "neural"}
    assert lr["list_mle-linear"] == 0.01 and lr["list_mle-mlp"] == lr["neural_ndcg-mlp"] == 0.002
    # The same run under a spec without the restriction has the same fingerprint: results carry over.
    plain = spec_from_dict(_spec(letor_files, losses=[losses[1] | {"models": None}], ensemble=False,
                                 baseline=None, neural=neural))
    by_id = {c.run_id: c.fingerprint() for c in expand(spec)}
    assert all(by_id[c.run_id] == c.fingerprint() for c in expand(plain) if c.method == "list_mle-linear")
    for bad, fragment in [(["nope"], "losses.1.models: ['nope'] not model label(s) of the spec"),
                          ([], "losses.1.models: empty")]:
        with pytest.raises(ConfigError, match="problem") as info:
            spec_from_dict(_spec(letor_files, models=models, losses=["neural_ndcg", {"name": "list_mle",
                                                                                    "models": bad}]))
        assert fragment in str(info.value)


@pytest.mark.parametrize(("normalize", "words"), [("zscore", "standardised"), ("rank", "rank-scaled"),
                                                  ("none", "raw")])
@pytest.mark.parametrize("learned", [False, True])
def test_a_blends_legend_names_its_normalisation(normalize, words, learned):
    # An audit (2026-11-25): the legend said "standardised scores" for blends of rank-scaled or raw ones.
    from smoothrank.experiments.report import format_markdown

    row = {"dataset": "d", "method": "b", "kind": "ensemble", "split": "test", "metric": "ndcg@1",
           "mean": 0.5, "std": 0.1, "n_folds": 2, "n_runs": 2, "baseline": "", "p_value": math.nan,
           "p_adjusted": math.nan, "t_statistic": math.nan, "n_queries": 0, "significant": 0,
           "blend_of": ["x", "y"], "blend_normalize": normalize}
    if learned:
        row.update(blend_learner={"loss": "list_net", "l2": 1e-3, "cv": 5},
                   blend_weights={"x": 0.5, "y": 0.5})
    text = format_markdown([row], metrics=["ndcg@1"], title="t", convention="letor4", baseline=None,
                           alpha=0.05)
    legend = next(line for line in text.splitlines() if line.startswith("`b`:"))
    assert f"per-query {words}" in legend
    assert all(other not in legend for other in ("standardised", "rank-scaled", "raw") if other != words)
