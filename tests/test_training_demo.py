"""The demo's leaderboard and the published LETOR 4.0 numbers."""

from __future__ import annotations

import io
import re

import pytest

from smoothrank.published import (
    COLUMNS,
    CONVENTION,
    MQ2008_BASELINES,
    MQ2008_BASELINES_PER_FOLD,
    PER_FOLD_COLUMNS,
)
from smoothrank.training.demo import DEFAULT_LOSSES, format_leaderboard, run_demo


def test_published_numbers_match_the_shared_readme(shared_dir):
    text = (shared_dir / "data" / "README.md").read_text()
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 7 and re.fullmatch(r"0\.\d{4}", cells[1]):
            rows[cells[0]] = dict(zip(COLUMNS, map(float, cells[1:]), strict=True))
    assert rows == MQ2008_BASELINES
    assert CONVENTION == "letor4"


def test_leaderboard_prints_convention_and_baselines():
    text = format_leaderboard({"NeuralNDCG": {c: 0.5 for c in COLUMNS}})
    assert "'letor4'" in text and "Eval-Score-4.0.pl" in text and "same test fold" in text
    for name in MQ2008_BASELINES:
        assert f"{name} (LETOR 4.0, Fold1)" in text and f"{name} (LETOR 4.0, 5-fold)" not in text
    assert "NeuralNDCG (ours, Fold1)" in text and "0.5000" in text
    listnet = next(line for line in text.splitlines() if line.startswith("ListNet (LETOR 4.0, Fold1)"))
    assert listnet.split()[4:] == ["0.3483", "0.4215", "0.4565", "0.2108", "-", "0.4504"]
    five = format_leaderboard({"ListNet": {c: 0.25 for c in COLUMNS}}, folds=[1, 2, 3, 4, 5])
    assert "ListNet (ours, 5-fold)" in five and "mean over 5-fold" in five
    for name, values in MQ2008_BASELINES.items():
        row = next(line for line in five.splitlines() if line.startswith(f"{name} (LETOR 4.0, 5-fold)"))
        assert [float(cell) for cell in row.split()[-6:]] == pytest.approx(
            [values[c] for c in COLUMNS], abs=1e-4)
    two = format_leaderboard({"ListNet": {c: 0.25 for c in COLUMNS}}, folds=[1, 3])
    row = next(line for line in two.splitlines() if line.startswith("ListNet (LETOR 4.0, Folds 1,3)"))
    assert float(row.split()[-3]) == pytest.approx((0.2108 + 0.2557) / 2, abs=1e-4)


@pytest.mark.parametrize("folds", [[], [0], [6], [1, 1], [2, 7]])
def test_baselines_for_folds_refuses_folds_outside_one_to_five(folds):
    from smoothrank.errors import SmoothrankError
    from smoothrank.published import baselines_for_folds

    with pytest.raises(SmoothrankError, match=r"folds: expected distinct folds among 1\.\.5"):
        baselines_for_folds(folds)


def test_per_fold_numbers_match_the_shared_readme(shared_dir):
    text = (shared_dir / "data" / "README.md").read_text()
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 6 or cells[0] not in MQ2008_BASELINES_PER_FOLD:
            continue
        for fold, cell in enumerate(cells[1:], 1):
            ndcgs, mean_ap = cell.split(";")
            expected = [float(v) for v in ndcgs.split("/")] + [float(mean_ap)]
            got = MQ2008_BASELINES_PER_FOLD[cells[0]][fold]
            assert [got[c] for c in PER_FOLD_COLUMNS] == expected


def test_demo_runs_end_to_end_on_real_data(shared_dir, capsys):
    from smoothrank.data import load_letor

    fold = shared_dir / "data" / "MQ2008" / "Fold1"
    # The real Fold1 validation and test splits, one epoch each, small slates: a smoke test of the
    # whole path (the full demo is `smoothrank demo`).
    splits = {"train": load_letor(fold / "vali.txt.gz"), "valid": load_letor(fold / "vali.txt.gz"),
              "test": load_letor(fold / "test.txt.gz")}
    out = io.StringIO()
    results = run_demo(epochs=1, splits=splits, stream=out)
    from smoothrank import losses

    expected = [n for n in DEFAULT_LOSSES if n in losses.available()]
    assert len(results) == len(expected) >= 3
    for values in results.values():
        assert set(values) == set(COLUMNS) and all(0.0 <= v <= 1.0 for v in values.values())
    assert "convention 'letor4'" in out.getvalue()
    assert "Fold1 NeuralNDCG" in capsys.readouterr().err  # progress on stderr
    with pytest.raises(ValueError, match="no_such_loss"):
        run_demo(losses=["no_such_loss"], epochs=1, splits=splits, stream=out)
