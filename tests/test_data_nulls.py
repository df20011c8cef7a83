"""LETOR 3.0's NULL feature values from configs, specs and the command line: filled with a number
(with a note saying how many), or kept missing (NaN) for LightGBM and XGBoost, refused by the
neural models without a fill value."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from smoothrank.data.missing import WithMissing
from smoothrank.datasets import load_splits
from smoothrank.errors import ConfigError, SmoothrankWarning


def _write(path: Path, rng: np.random.Generator, queries: int, qid0: int, nulls: bool = True) -> Path:
    lines = []
    for q in range(queries):
        for d in range(6):
            label = int(rng.integers(0, 3))
            values = [f"{j + 1}:NULL" if nulls and (q + d + j) % 7 == 0 else
                      f"{j + 1}:{round(label + rng.normal(), 3)}" for j in range(4)]
            lines.append(f"{label} qid:{qid0 + q} {' '.join(values)} #docid = d{q}-{d}")
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("nulls")
    rng = np.random.default_rng(0)
    for name, n, qid0 in (("train", 16, 1), ("vali", 6, 100), ("test", 6, 200)):
        _write(root / f"{name}.txt", rng, n, qid0)
    return root


def _section(root: Path, **extra) -> dict:
    return {"train": str(root / "train.txt"), "valid": str(root / "vali.txt"), "test": str(root / "test.txt"),
            **extra}


def _null_positions(path: Path) -> np.ndarray:
    rows = [line.split("#")[0].split()[2:] for line in path.read_text().splitlines()]
    return np.array([[tok.endswith(":NULL") for tok in row] for row in rows])


@pytest.mark.parametrize(("null_value", "fill"), [(None, 0.0), (2.5, 2.5), (-1, -1.0)])
def test_filled_nulls_are_noted_with_their_count(folder, null_value, fill):
    with pytest.warns(SmoothrankWarning) as caught:
        splits = load_splits(_section(folder, null_value=null_value))
    nulls = _null_positions(folder / "train.txt")
    messages = [str(w.message) for w in caught]
    note = f"data.train: {int(nulls.sum())} NULL feature value(s)"
    assert any(m.startswith(note) and f"filled with {fill:g}" in m for m in messages), messages
    assert np.all(splits["train"].features[nulls] == fill)


def test_nan_keeps_nulls_missing_for_the_boosters(folder):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing filled: no note
        splits = load_splits(_section(folder, null_value="nan"), missing_ok=True)
    train = splits["train"]
    assert isinstance(train, WithMissing)
    assert np.array_equal(np.isnan(train.features), _null_positions(folder / "train.txt"))
    assert train.n_docs == train.dataset.n_docs and train.source.endswith("train.txt")


def test_the_neural_models_refuse_nan_without_a_fill_value(folder):
    with pytest.raises(ConfigError, match=r"data.train: .*train.txt has \d+ NULL feature value\(s\) and "
                                          r"null_value is 'nan'.*give null_value a number"):
        load_splits(_section(folder, null_value="nan"))


@pytest.mark.parametrize("bad", ["zero", float("inf"), True, [0]])
def test_a_bad_null_value_is_refused_naming_it(folder, bad):
    with pytest.raises(ConfigError, match=r"data\.null_value: expected"):
        load_splits(_section(folder, null_value=bad))


@pytest.mark.parametrize("library", ["lightgbm", "xgboost"])
def test_boosters_learn_from_missing_values_and_predict_scores_them(folder, tmp_path, library, capsys):
    pytest.importorskip(library)
    from smoothrank.cli import main
    from smoothrank.data import read_predictions
    from smoothrank.experiments.gbdt import fit_gbdt, save_booster

    splits = load_splits(_section(folder, null_value="nan"), missing_ok=True)
    objective = "lambdarank" if library == "lightgbm" else "rank:ndcg"
    params = {"min_data_in_leaf": 2} if library == "lightgbm" else {}
    fitted = fit_gbdt(splits["train"], splits["valid"], library=library, objective=objective, params=params,
                      num_boost_round=5, early_stopping_rounds=None, eval_at=5, seed=0, num_threads=1)
    scores = fitted.predict(splits["test"])
    model = save_booster(fitted, tmp_path)
    out = tmp_path / "p.pred"
    test = str(folder / "test.txt")
    assert main(["predict", str(model), test, "--out", str(out), "--null-value", "nan"]) == 0
    assert np.allclose(read_predictions(out), scores, rtol=1e-6, atol=1e-6)
    # Without --null-value the NULLs are filled with 0, and the output says so.
    assert main(["predict", str(model), str(folder / "test.txt"), "--out", str(out)]) == 0
    assert "NULL feature value(s)" in capsys.readouterr().err


def test_an_epoch_of_few_optimiser_steps_is_warned_of(folder, tmp_path):
    # 16 training queries at batch 8: 2 steps an epoch (the 64 queries at batch 32).
    from smoothrank.errors import ShortEpochWarning
    from smoothrank.experiments import run_experiment, spec_from_dict

    def run(batch_size: int) -> list[str]:
        spec = spec_from_dict({"name": "short", "seeds": [0], "datasets": [
            {"name": "nulls", **_section(folder), "null_value": 0}],
            "neural": {"training": {"epochs": 1, "batch_size": batch_size, "list_size": 8}},
            "losses": ["list_net"], "models": [{"label": "linear", "kind": "linear"}]})
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            run_experiment(spec, tmp_path / f"b{batch_size}")
        return [str(w.message) for w in caught if w.category is ShortEpochWarning]

    (message,) = run(8)
    assert message.startswith("nulls--files--list_net-linear--seed0: training.batch_size=8: an epoch is 2 "
                              "optimiser step(s) (16 training queries)")
    assert "training.batch_size=1 gives 16 steps" in message
    assert run(2) == []  # 8 steps


def test_count_nulls_reads_a_chunk_at_a_time(tmp_path):
    # Reading the whole file to count its NULLs held a 3.9 GB MSLR-size file in memory at once (the
    # 3883 MiB peak of a training epoch on it): the count now reads a chunk at a time.
    import gzip
    import tracemalloc

    from smoothrank.data.missing import count_nulls

    line = b"0 qid:1 1:NULL 2:0.5 3:NULL #docid = d\n"
    path = tmp_path / "n.txt"
    path.write_bytes(line * 50_000)  # 2 MB
    small = tmp_path / "small.txt"
    small.write_bytes(line * 3)
    for chunk in (1, 2, 3, 4, 5, 7, 11):  # tokens split at every position between two chunks
        assert count_nulls(small, chunk=chunk) == 6
    tracemalloc.start()
    try:
        assert count_nulls(path, chunk=1 << 16) == 100_000
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < path.stat().st_size // 8  # a few chunks, not the file
    gz = tmp_path / "n.txt.gz"
    gz.write_bytes(gzip.compress(line * 1000))
    assert count_nulls(gz, chunk=100) == 2000
