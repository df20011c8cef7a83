"""experiments/tuning_surface.py: settings ordered by validation, and their rank correlation with test."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from conftest import load_experiment_script


@pytest.fixture(scope="module")
def surface():
    return load_experiment_script("tuning_surface")


def _summary(path: Path, rows: dict[str, tuple[float, float]]) -> Path:
    """A summary.csv with validation and test ndcg@10 per method (other columns as the runner writes)."""
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["dataset", "method", "kind", "split", "metric", "mean", "std"])
        writer.writeheader()
        for method, (valid, test) in rows.items():
            for split, value in (("valid", valid), ("test", test), ("train", 0.9)):
                writer.writerow({"dataset": "d", "method": method, "kind": "gbdt", "split": split,
                                 "metric": "ndcg@10", "mean": value, "std": 0.0})
    return path


def test_orders_by_validation_and_correlates_with_test(surface, tmp_path, capsys):
    # Validation order a > b > c > d; test order a > c > b > d: rho = 1 - 6*2/(4*15) = 0.8.
    path = _summary(tmp_path / "summary.csv", {"m-a": (0.4, 0.30), "m-b": (0.3, 0.20), "m-c": (0.2, 0.25),
                                               "m-d": (0.1, 0.10), "other": (0.9, 0.0)})
    assert surface.main([str(path), "--methods", "^m-"]) == 0
    out = capsys.readouterr().out
    body = [line.split(" | ")[0].strip("| ") for line in out.splitlines() if line.startswith("| m-")]
    assert body == ["m-a", "m-b", "m-c", "m-d"]
    assert "other" not in out
    assert "over 4 methods: 0.800" in out


def test_refuses_too_few_methods_and_a_bad_pattern(surface, tmp_path, capsys):
    path = _summary(tmp_path / "summary.csv", {"m-a": (0.4, 0.3), "m-b": (0.3, 0.2)})
    with pytest.raises(SystemExit):
        surface.main([str(path), "--methods", "^m-"])
    assert "fewer than 3 methods" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        surface.main([str(path), "--methods", "("])
    assert "--methods" in capsys.readouterr().err
