"""A user's own k-fold LETOR folders in one spec: ``folds: [...]`` with ``{fold}`` in the paths,
summarised like the bundled MQ2008 folds (mean ± std over folds, the paired test over every
fold's test queries)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import write_synthetic_folds

from smoothrank.cli import main as cli_main
from smoothrank.errors import ConfigError
from smoothrank.experiments import expand, spec_from_dict
from smoothrank.experiments.stats import paired_ttest

pytest.importorskip("lightgbm")

FOLDS = [1, 2, 3]


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("letor3")
    for k in FOLDS:  # LETOR 3.0's layout: Fold<k>/{train,vali,test}.txt
        (base / f"Fold{k}").mkdir()
        write_synthetic_folds(base / f"Fold{k}", seed=10 + k, queries=(20, 8, 8), docs=6)
    return base


def _spec(root: Path, **dataset) -> dict:
    ds = {"name": "own", "folds": FOLDS, "train": "Fold{fold}/train.txt", "valid": "Fold{fold}/vali.txt",
          "test": "Fold{fold}/test.txt", **dataset}
    gbdt = {"library": "lightgbm", "num_boost_round": 4, "early_stopping_rounds": 2,
            "params": {"min_data_in_leaf": 3}}
    return {"name": "own", "convention": "letor4", "seeds": [0], "datasets": [ds],
            "gbdt": [{**gbdt, "objective": "lambdarank"}, {**gbdt, "objective": "rank_xendcg"}],
            "baseline": "lightgbm-lambdarank", "metrics": ["ndcg@1", "ndcg@5", "map"], "select_by": "ndcg@5"}


def test_folds_expand_to_one_run_per_fold_with_their_files(root):
    spec = spec_from_dict(_spec(root), base_dir=root)
    cells = expand(spec)
    assert [c.fold for c in cells] == [1, 1, 2, 2, 3, 3]
    assert cells[2].run_id == "own--fold2--lightgbm-lambdarank--seed0"
    assert cells[2].settings["data"]["test"] == str((root / "Fold2" / "test.txt").resolve())


def test_a_five_fold_style_spec_is_summarised_over_its_folds(root, tmp_path):
    path = root / "spec.yaml"
    path.write_text(yaml.safe_dump(_spec(root)))
    out = tmp_path / "out"
    assert cli_main(["experiment", str(path), "--out", str(out), "--quiet"]) == 0
    results = {p.parent.name: json.loads(p.read_text()) for p in (out / "runs").glob("*/result.json")}
    assert len(results) == 2 * len(FOLDS)
    rows = json.loads((out / "summary.json").read_text())["rows"]
    for method in ("lightgbm-lambdarank", "lightgbm-rank_xendcg"):
        per_fold = [results[f"own--fold{k}--{method}--seed0"]["metrics"]["test"]["ndcg@5"] for k in FOLDS]
        (row,) = [r for r in rows
                  if r["method"] == method and r["split"] == "test" and r["metric"] == "ndcg@5"]
        assert row["n_folds"] == len(FOLDS)
        assert row["mean"] == pytest.approx(np.mean(per_fold), abs=1e-12)
        assert row["std"] == pytest.approx(np.std(per_fold, ddof=1), abs=1e-12)
    # The paired test runs over every fold's test queries together.
    a, b = ([v for k in FOLDS for v in results[f"own--fold{k}--{m}--seed0"]["per_query"]["ndcg@5"]]
            for m in ("lightgbm-rank_xendcg", "lightgbm-lambdarank"))
    (row,) = [r for r in rows if r["method"] == "lightgbm-rank_xendcg" and r["split"] == "test"
              and r["metric"] == "ndcg@5"]
    assert row["n_queries"] == 8 * len(FOLDS)
    assert row["p_value"] == pytest.approx(paired_ttest(a, b).pvalue, abs=1e-12)
    assert "own" in (out / "summary.md").read_text()


@pytest.mark.parametrize(("dataset", "fragments"), [
    ({"train": "Fold1/train.txt"}, ["datasets.0.train: folds are given but the path has no {fold}"]),
    ({"folds": None}, ["datasets.0.train: {fold} in the path needs folds", "datasets.0.test: {fold}"]),
    ({"folds": [1, 1]}, ["datasets.0.folds: expected distinct fold numbers"]),
    ({"folds": [1, 2, 9]}, ["datasets.0.train: no such file (fold 9):",
                            "datasets.0.test: no such file (fold 9)"]),
    ({"null_value": "zero"}, ["null_value: expected a number"]),
])
def test_fold_pattern_problems_are_named(root, dataset, fragments):
    with pytest.raises(ConfigError) as info:
        spec_from_dict(_spec(root, **dataset), base_dir=root)
    for fragment in fragments:
        assert fragment in str(info.value), (fragment, str(info.value))


def test_an_unknown_top_level_key_does_not_hide_the_specs_other_errors(root):
    data = _spec(root, folds=[1, 1]) | {"metircs": ["ndcg@1"], "select_by": "ndcg@10"}
    with pytest.raises(ConfigError) as info:
        spec_from_dict(data, base_dir=root)
    message = str(info.value)
    for fragment in ("metircs: unknown key", "datasets.0.folds: expected distinct fold numbers",
                     "select_by: 'ndcg@10' must be one of metrics"):
        assert fragment in message, (fragment, message)
    with pytest.raises(ConfigError, match=r"(?s)base_dir: unknown key.*datasets\.0\.folds"):
        spec_from_dict(_spec(root, folds=[1, 1]) | {"base_dir": "/"}, base_dir=root)
