"""Plots: the curves behind each figure against hand values and independent references; valid PNGs."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import norm

from smoothrank import plots
from smoothrank.cli import main as cli_main
from smoothrank.errors import DataFormatError, SmoothrankError
from smoothrank.experiments.report import format_csv, summarize

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _assert_png(path: Path, min_width: int = 300) -> None:
    import matplotlib.image as mpimg

    assert path.read_bytes()[:8] == PNG_MAGIC
    image = mpimg.imread(path)
    assert image.shape[1] >= min_width and image.shape[0] >= 200
    assert float(image[..., :3].std()) > 0.01  # not a blank canvas
    assert not list(path.parent.glob(".*.tmp")) and not list(path.parent.glob(f".{path.name}*"))


def test_figure1_curves(tmp_path):
    xs = np.array([-1.5, 0.5, 2.5, 3.5, 5.0])
    data = plots.neuralndcg_figure1(tmp_path / "f1.png", xs=xs)
    _assert_png(tmp_path / "f1.png")
    # Hand values: y = [2, 1, 0, 0, 0], s = [4, 1, 0, 0, x]; ideal DCG = 3 + 1/log2(3).
    ideal = 3 + 1 / math.log2(3)
    expected = [1.0, 1.0, 3.5 / ideal, 3.5 / ideal, (3 / math.log2(3) + 0.5) / ideal]
    np.testing.assert_allclose(data["ndcg"], expected, rtol=1e-12)
    # Sinkhorn makes P-hat doubly stochastic: the quasi-sorted gains keep their sum, so NeuralNDCG <= 1.
    assert np.all(data["with_sinkhorn"] <= 1 + 1e-6) and np.all(data["with_sinkhorn"] > 0)
    assert np.all(np.isfinite(data["without_sinkhorn"]))
    # Higher x pushes the irrelevant document up: the smooth curve decreases overall.
    assert data["with_sinkhorn"][0] > data["with_sinkhorn"][-1]


def test_a_device_is_written_in_place_and_other_names_need_png(tmp_path):
    # training.md: an existing device or FIFO (/dev/null) is written in place, as for predict.
    plots.neuralndcg_figure1("/dev/null", xs=np.array([0.0, 1.0]))
    with pytest.raises(SmoothrankError, match=r"--out: expected a \.png file name"):
        plots.neuralndcg_figure1(tmp_path / "f1.jpg", xs=np.array([0.0, 1.0]))
    assert not list(tmp_path.iterdir())


def test_figure2_small_temperature_recovers_ndcg(tmp_path):
    xs = np.array([-0.5, 1.5, 2.5, 3.5, 6.0])  # away from the ties at 1, 2, 3, 4
    data = plots.neuralndcg_figure2(tmp_path / "f2.png", temperatures=(0.01, 1.0), xs=xs)
    _assert_png(tmp_path / "f2.png")
    np.testing.assert_allclose(data["tau=0.01"], data["ndcg"], atol=1e-4)
    assert np.abs(data["tau=1"] - data["ndcg"]).max() > 1e-3  # tau = 1 is visibly smooth
    assert data["ndcg"][-1] == pytest.approx(1.0)  # x = 6 puts the label-5 document first: ideal order


def test_softrank_figure_matches_contest_probabilities(tmp_path):
    scores, sigma = (-0.5, -0.2, 0.4), 0.2
    data = plots.softrank_figure(tmp_path / "sr.png", scores=scores, sigma=sigma)
    _assert_png(tmp_path / "sr.png", min_width=800)
    p = data["rank_probs"]
    np.testing.assert_allclose(p.sum(axis=1), 1.0, atol=1e-12)
    # Eq. 10: E[r_j] = sum_{i != j} pi_ij with pi_ij = Phi((s_i - s_j) / (sqrt(2) sigma)) (eq. 9).
    s = np.asarray(scores)
    pi = norm.cdf((s[:, None] - s[None, :]) / (math.sqrt(2) * sigma))
    np.fill_diagonal(pi, 0.0)
    np.testing.assert_allclose(p @ np.arange(3), pi.sum(axis=0), atol=1e-10)
    assert p[2].argmax() == 0 and p[0].argmax() == 2  # the highest score is most likely ranked first
    d = 1.0 / np.log2(np.arange(10) + 2.0)
    assert float(data["expected_discount"]) == pytest.approx(float(data["long_rank_probs"][2] @ d))
    with pytest.raises(SmoothrankError, match="document"):
        plots.softrank_figure(tmp_path / "x.png", document=10)


def _write_log(run_dir: Path, epochs: int = 4) -> None:
    run_dir.mkdir(parents=True)
    rows = [{"epoch": e, "lr": 1e-3, "loss": -0.5 - 0.05 * e, "valid_ndcg@10": 0.4 + 0.01 * e,
             "valid_map": 0.45 + 0.005 * e, "reinitialized": False, "best_epoch": e, "seconds": 0.1,
             "early_stopped": False} for e in range(1, epochs + 1)]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_training_curves(tmp_path):
    run = tmp_path / "exp" / "runs" / "r1" / "train"
    _write_log(run)
    # Both the trainer's folder and the experiment run folder above it are accepted.
    data = plots.training_curves(run.parent, tmp_path / "curves.png")
    _assert_png(tmp_path / "curves.png")
    np.testing.assert_allclose(data["epoch"], [1, 2, 3, 4])
    np.testing.assert_allclose(data["valid_ndcg@10"], [0.41, 0.42, 0.43, 0.44])
    assert set(data) == {"epoch", "loss", "valid_ndcg@10", "valid_map"}
    (run / "metrics.jsonl").write_text('{"epoch": 1, "loss": 0.1}\nnot json\n')
    with pytest.raises(DataFormatError, match=r"metrics\.jsonl:2"):
        plots.training_curves(run, tmp_path / "bad.png")
    # Valid JSON with values that are not numbers (a review found a traceback, or a silent figure).
    for line, key in (('{"epoch": "a", "loss": 0.1}', "epoch"), ('{"epoch": 2, "loss": [1]}', "loss"),
                      ('{"epoch": 2, "loss": 0.1, "best_epoch": "x"}', "best_epoch"),
                      ('{"epoch": 2, "loss": 0.1, "valid_map": true}', "valid_map"),
                      ('{"epoch": null, "loss": 0.1}', "epoch")):
        (run / "metrics.jsonl").write_text('{"epoch": 1, "loss": 0.1}\n' + line + "\n")
        with pytest.raises(DataFormatError, match=rf"metrics\.jsonl:2: '{key}' is .*, expected a number"):
            plots.training_curves(run, tmp_path / "bad.png")
    assert not (tmp_path / "bad.png").exists()
    (run / "metrics.jsonl").write_text('{"epoch": 1, "loss": 0.1, "valid_map": null}\n')  # undefined metric
    plots.training_curves(run, tmp_path / "ok.png")


def _summary_csv(tmp_path: Path, dataset: str = "mq2008", convention: str = "letor4") -> Path:
    results = []
    for method, shift in (("a", 0.0), ("b", 0.1)):
        for fold in (1, 2):
            test = [0.3 + shift + 0.01 * fold, 0.5 + shift]
            results.append({"dataset": dataset, "method": method, "fold": fold, "seed": 0, "kind": "neural",
                            "metrics": {"test": {"ndcg@1": float(np.mean(test)), "map": 0.4 + shift},
                                        "train": {"ndcg@1": 0.6, "map": 0.6}},
                            "per_query": {"qids": ["q1", "q2"], "ndcg@1": test, "map": [0.4, 0.4]}})
    tmp_path.mkdir(parents=True, exist_ok=True)
    csv_path = tmp_path / "summary.csv"
    csv_path.write_text(format_csv(summarize(results, metrics=["ndcg@1", "map"], baseline="a"),
                                   convention=convention))
    return csv_path


def _without_convention(csv_path: Path) -> Path:
    """``csv_path`` as written before summary.csv had its columns ``convention`` and ``se``."""
    lines = csv_path.read_text().splitlines()
    assert lines[0].endswith(",convention,se")
    csv_path.write_text("".join(line.rsplit(",", 2)[0] + "\n" for line in lines))
    return csv_path


@pytest.fixture
def figure_titles(monkeypatch) -> list[list[str]]:
    """The titles (figure and axes) of each figure the plots module saves, in order."""
    from smoothrank.plots import figures

    saved: list[list[str]] = []
    original = figures._save

    def save(fig, path):
        titles = [fig._suptitle.get_text()] if fig._suptitle is not None else []
        saved.append(titles + [ax.get_title() for ax in fig.axes])
        return original(fig, path)

    monkeypatch.setattr(figures, "_save", save)
    return saved


def test_summary_forest_and_selections(tmp_path):
    csv_path = _summary_csv(tmp_path)
    refs = {"published X": {"ndcg@1": 0.45, "map": 0.42}, "only map": {"map": 0.5}}
    data = plots.summary_forest(csv_path, tmp_path / "forest.png", references=refs)
    _assert_png(tmp_path / "forest.png")
    assert data["methods"] == ["a", "b"] and data["metrics"] == ["ndcg@1", "map"]
    np.testing.assert_allclose(data["mean"], [[0.4075, 0.4], [0.5075, 0.5]], atol=1e-5)
    np.testing.assert_allclose(data["std"][:, 0], [0.005 / 2 ** 0.5] * 2, atol=1e-7)  # folds differ by 0.005
    assert data["references"] == refs
    # --methods / --metrics pick and order; unknown names are a clear error naming the file.
    data = plots.summary_bars(csv_path, tmp_path / "bars.png", methods=["b"], metrics=["map"])
    assert data["methods"] == ["b"] and data["metrics"] == ["map"] and data["mean"].tolist() == [[0.5]]
    with pytest.raises(SmoothrankError, match=r"--methods: \['c'\] not in .*summary.csv"):
        plots.summary_forest(csv_path, tmp_path / "x.png", methods=["a", "c"])
    with pytest.raises(SmoothrankError, match=r"--metrics: \['ndcg@9'\]"):
        plots.summary_forest(csv_path, tmp_path / "x.png", metrics=["ndcg@9"])
    assert not (tmp_path / "x.png").exists()


def test_summary_figures_name_the_metric_convention(tmp_path, figure_titles):
    csv_path = _summary_csv(tmp_path, convention="lightgbm")
    assert plots.summary_convention(csv_path) == "lightgbm"
    assert plots.summary_bars(csv_path, tmp_path / "bars.png")["convention"] == "lightgbm"
    assert plots.summary_forest(csv_path, tmp_path / "forest.png")["convention"] == "lightgbm"
    bars, forest = figure_titles
    assert bars == ["mq2008: test set\nmetric convention: lightgbm"]
    assert forest[0] == "mq2008: test set, mean ± std over folds\nmetric convention: lightgbm"
    _assert_png(tmp_path / "bars.png")
    _assert_png(tmp_path / "forest.png")


@pytest.mark.parametrize("spec, convention", [("name: x\nconvention: trec\n", "trec"),
                                              ("name: x\n", "letor4"), (None, None)])
def test_summary_figures_of_a_csv_without_the_convention_column(tmp_path, figure_titles, spec, convention):
    # A summary.csv written before the column: the experiment's spec.yaml beside it says (letor4 is
    # the spec default); without one, the title says that the convention is not recorded.
    csv_path = _without_convention(_summary_csv(tmp_path, convention="lightgbm"))
    if spec is not None:
        (tmp_path / "spec.yaml").write_text(spec)
    assert plots.summary_convention(csv_path) == convention
    data = plots.summary_bars(csv_path, tmp_path / "bars.png")
    np.testing.assert_allclose(data["mean"], [[0.4075, 0.4], [0.5075, 0.5]], atol=1e-5)
    assert plots.summary_forest(csv_path, tmp_path / "forest.png")["convention"] == convention
    _assert_png(tmp_path / "forest.png")
    shown = f"metric convention: {convention or 'not recorded'}"
    assert [titles[0].splitlines()[-1] for titles in figure_titles] == [shown, shown]


def test_cli_plot_forest_with_published_rows(tmp_path, capsys):
    from smoothrank.published import MQ2008_BASELINES

    csv_path = _summary_csv(tmp_path)
    out = tmp_path / "f.png"
    assert cli_main(["plot", "forest", str(csv_path), "--out", str(out), "--published",
                     "--methods", "b,a", "--metrics", "map"]) == 0
    _assert_png(out)
    assert str(out) in capsys.readouterr().out
    # The published rows apply to an MQ2008 test split under letor4 only: the convention is the
    # summary's column, or for a summary written before it, the spec's beside it.
    lightgbm = _summary_csv(tmp_path / "lightgbm", convention="lightgbm")
    assert cli_main(["plot", "forest", str(lightgbm), "--out", str(out), "--published"]) == 2
    assert "under 'lightgbm'" in capsys.readouterr().err
    (tmp_path / "spec.yaml").write_text("name: x\nconvention: lightgbm\n")
    assert cli_main(["plot", "forest", str(csv_path), "--out", str(out), "--published"]) == 0  # the column
    capsys.readouterr()
    _without_convention(csv_path)
    assert cli_main(["plot", "forest", str(csv_path), "--out", str(out), "--published"]) == 2
    assert "letor4" in capsys.readouterr().err
    (tmp_path / "spec.yaml").write_text("name: x\nconvention: letor4\n")
    assert cli_main(["plot", "forest", str(csv_path), "--out", str(out), "--published",
                     "--split", "valid"]) == 2
    assert "test-set values" in capsys.readouterr().err
    other = _summary_csv(tmp_path / "other", "mslr")
    assert cli_main(["plot", "forest", str(other), "--out", str(out), "--published"]) == 2
    assert "'mslr'" in capsys.readouterr().err
    assert cli_main(["plot", "summary", str(csv_path), "--out", str(out), "--published"]) == 2
    assert "only for plot forest" in capsys.readouterr().err
    assert cli_main(["plot", "forest", str(csv_path), "--out", str(out), "--methods", ","]) == 2
    assert "--methods" in capsys.readouterr().err
    assert len(MQ2008_BASELINES) == 5


def test_repeated_names_are_drawn_once_and_a_mistyped_dataset_is_named(tmp_path, capsys):
    # An audit (2026-11-25): --metrics map,map drew two identical panels; --published with a
    # mistyped --dataset said the published rows do not apply instead of naming the dataset.
    csv_path = _summary_csv(tmp_path)
    for figure in (plots.summary_forest, plots.summary_bars):
        data = figure(csv_path, tmp_path / "x.png", metrics=["map", "map"], methods=["b", "a", "b"])
        assert data["metrics"] == ["map"] and data["methods"] == ["b", "a"]
    out = tmp_path / "f.png"
    assert cli_main(["plot", "forest", str(csv_path), "--out", str(out), "--metrics", "map,map"]) == 0
    capsys.readouterr()
    assert cli_main(["plot", "forest", str(csv_path), "--out", str(out), "--published",
                     "--dataset", "foo"]) == 2
    assert "--dataset: 'foo' is not in" in capsys.readouterr().err
    # An empty summary keeps its own error (a review: "--dataset: 'mq2008' is not in ...; it has []").
    header = tmp_path / "empty" / "summary.csv"
    header.parent.mkdir()
    header.write_text(csv_path.read_text().splitlines()[0] + "\n")
    assert cli_main(["plot", "forest", str(header), "--out", str(out), "--published",
                     "--dataset", "mq2008"]) == 2
    assert "no rows" in capsys.readouterr().err


def test_curves_legend_lists_the_selected_epoch(tmp_path, monkeypatch):
    # An audit (2026-11-25): the legend was made before the selected-epoch line was drawn.
    from smoothrank.plots import figures

    legends: list[list[str]] = []
    original = figures._save

    def save(fig, path):
        legends.extend([text.get_text() for text in ax.get_legend().get_texts()]
                       for ax in fig.axes if ax.get_legend() is not None)
        return original(fig, path)

    monkeypatch.setattr(figures, "_save", save)
    run = tmp_path / "run"
    _write_log(run)
    plots.training_curves(run, tmp_path / "curves.png")
    assert legends == [["valid_ndcg@10", "valid_map", "selected epoch"]]


def test_figure2_keeps_a_curve_per_temperature(tmp_path):
    # An audit (2026-11-25): 0.1 and 0.1000001 both formatted to "tau=0.1", so one curve was lost.
    data = plots.neuralndcg_figure2(tmp_path / "f2.png", temperatures=[0.01, 0.1, 0.1000001, 0.1, 1, 2],
                                    xs=np.linspace(0.0, 6.0, 7))
    # only the two that read alike get more digits (a review: every key had become repr, "tau=1.0")
    assert [key for key in data if key.startswith("tau=")] == ["tau=0.01", "tau=0.1", "tau=0.1000001",
                                                               "tau=1", "tau=2"]
    assert not np.array_equal(data["tau=0.1"], data["tau=0.1000001"])


def test_summary_bars(tmp_path):
    csv_path = _summary_csv(tmp_path)
    data = plots.summary_bars(csv_path, tmp_path / "bars.png")
    _assert_png(tmp_path / "bars.png")
    assert data["methods"] == ["a", "b"] and data["metrics"] == ["ndcg@1", "map"]
    np.testing.assert_allclose(data["mean"], [[0.4075, 0.4], [0.5075, 0.5]], atol=1e-5)
    with pytest.raises(SmoothrankError, match="--dataset"):
        plots.summary_bars(csv_path, tmp_path / "x.png", dataset="nope")
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    with pytest.raises(DataFormatError, match="not an experiment summary"):
        plots.summary_bars(tmp_path / "other.csv", tmp_path / "x.png")


@pytest.mark.parametrize("figure", ["figure1", "figure2", "softrank"])
def test_cli_plot_figures(tmp_path, capsys, figure):
    out = tmp_path / f"{figure}.png"
    assert cli_main(["plot", figure, "--out", str(out)]) == 0
    _assert_png(out)
    assert str(out) in capsys.readouterr().out


def test_cli_plot_errors(tmp_path, capsys):
    run = tmp_path / "run"
    _write_log(run)
    assert cli_main(["plot", "curves", str(run), "--out", str(tmp_path / "c.png")]) == 0
    _assert_png(tmp_path / "c.png")
    capsys.readouterr()
    assert cli_main(["plot", "curves", "--out", str(tmp_path / "c.png")]) == 2
    assert "run directory" in capsys.readouterr().err
    assert cli_main(["plot", "curves", str(tmp_path / "missing"), "--out", str(tmp_path / "c.png")]) == 2
    assert "missing" in capsys.readouterr().err
    assert cli_main(["plot", "figure1", "--out", str(tmp_path / "f.jpg")]) == 2
    assert ".png" in capsys.readouterr().err
    assert cli_main(["plot", "figure2", "--temperatures", "1,-2", "--out", str(tmp_path / "f.png")]) == 2
    assert "--temperatures" in capsys.readouterr().err


def test_missing_matplotlib_is_a_clear_error(monkeypatch, tmp_path, capsys):
    import sys

    from smoothrank.cli import main

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib` fail
    assert main(["plot", "figure1", "--out", str(tmp_path / "f.png")]) == 2
    assert not (tmp_path / "f.png").exists()
    assert "matplotlib" in capsys.readouterr().err


# ---- a review of 2026-11-25 (adversarial inputs to plot): each of these was a traceback or a silent,
# wrong figure.
def test_names_with_dollars_and_undecodable_folders_are_drawn_verbatim(tmp_path, figure_titles):
    # matplotlib reads $...$ as math (an unpaired $ was a ParseSyntaxException traceback), and a
    # folder name that is not UTF-8 (a lone surrogate in Python) was a TypeError.
    run = tmp_path / "cost_$5_to_$10"
    _write_log(run)
    plots.training_curves(run, tmp_path / "c.png")
    _assert_png(tmp_path / "c.png")
    assert figure_titles[-1][0] == rf"training curves: {tmp_path}/cost_\$5_to_\$10"
    odd = Path(os.fsdecode(bytes(tmp_path) + b"/\xff"))
    _write_log(odd)
    plots.training_curves(odd, tmp_path / "odd.png")
    assert figure_titles[-1][0].endswith("/\ufffd")
    csv_path = _summary_csv(tmp_path / "dollar")
    csv_path.write_text(csv_path.read_text().replace("\nmq2008,a,", "\nmq2008,a$^$b,"))
    bars = plots.summary_bars(csv_path, tmp_path / "bars.png")
    forest = plots.summary_forest(csv_path, tmp_path / "forest.png", references={"$x": {"map": 0.4}})
    assert bars["methods"] == forest["methods"] == ["a$^$b", "b"]
    _assert_png(tmp_path / "bars.png")
    _assert_png(tmp_path / "forest.png")


@pytest.mark.parametrize(("edit", "message"), [
    (lambda text: text + "mq2008,a,neural,test,ndcg@1\n", r":10: 17 fields expected"),  # truncated
    # the record with the open quote is named (csv's own count stays at the last good record)
    (lambda text: text.replace("\nmq2008,b,", '\nmq2008,"b,', 1), r":6: not CSV \(unexpected end of data"),
    (lambda text: text.replace("\nmq2008,b,", '\nmq2008,"b"x,', 1), r":6: not CSV \(',' expected after"),
    (lambda text: text + text.splitlines(keepends=True)[1],
     r"a second row for .*'a', 'test'.*first is on line 2"),
    (lambda text: text.replace(text.splitlines()[1], ",".join(  # line 2 without its mean
        "" if i == 5 else cell for i, cell in enumerate(text.splitlines()[1].split(",")))),
     r":2: column 'mean': empty"),
])
def test_a_damaged_summary_is_refused_not_drawn(tmp_path, edit, message):
    csv_path = _summary_csv(tmp_path)
    text = csv_path.read_text()
    assert text.splitlines()[0].split(",")[:6] == ["dataset", "method", "kind", "split", "metric", "mean"]
    assert text.splitlines()[5].startswith("mq2008,b,")  # line 6 is b's first row
    csv_path.write_text(edit(text))
    for draw in (plots.summary_bars, plots.summary_forest):
        with pytest.raises(DataFormatError, match=message):
            draw(csv_path, tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


def test_a_summary_with_a_byte_order_mark_or_a_missing_cell(tmp_path, monkeypatch):
    from smoothrank.plots import figures

    drawn: list[list[float]] = []  # the bar heights of each figure saved
    original = figures._save

    def save(fig, path):
        drawn.append([patch.get_height() for ax in fig.axes for patch in ax.patches])
        return original(fig, path)

    monkeypatch.setattr(figures, "_save", save)
    csv_path = _summary_csv(tmp_path)
    text = csv_path.read_text()
    # As spreadsheet programs save it: a byte-order mark, and trailing rows of commas only.
    csv_path.write_bytes(b"\xef\xbb\xbf" + text.encode() + b"," * 16 + b"\n" + b"," * 16 + b"\n")
    np.testing.assert_allclose(plots.summary_bars(csv_path, tmp_path / "x.png")["mean"],
                               [[0.4075, 0.4], [0.5075, 0.5]], atol=1e-5)
    np.testing.assert_allclose(drawn[-1], [0.4075, 0.4, 0.5075, 0.5], atol=1e-5)
    # A (method, metric) with no row is unknown, not a score of 0: no bar (it was drawn at 0), no dot.
    csv_path.write_text("".join(line for line in text.splitlines(keepends=True)
                                if not line.startswith("mq2008,b,neural,test,map,")))
    for draw in (plots.summary_bars, plots.summary_forest):
        mean = draw(csv_path, tmp_path / "x.png")["mean"]
        assert math.isnan(mean[1, 1]) and np.isfinite(mean[[0, 0, 1], [0, 1, 0]]).all()
        _assert_png(tmp_path / "x.png")
    heights = drawn[-2]  # the bars: a's two, b's ndcg@1, and b's map not drawn at 0
    assert len(heights) == 4 and math.isnan(heights[3]) and min(heights[:3]) > 0.3


def test_curves_draw_every_logged_metric_and_refuse_non_finite_epochs(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    log = run / "metrics.jsonl"
    # A metric undefined (null) in the last epoch, and whole-number values, were left out of the figure.
    log.write_text('{"epoch": 1, "loss": 1, "valid_map": 0.4, "valid_ndcg@1": 1, "best_epoch": 1}\n'
                   '{"epoch": 2, "loss": 0.5, "valid_map": null, "valid_ndcg@1": 1, "best_epoch": 1}\n')
    data = plots.training_curves(run, tmp_path / "c.png")
    assert set(data) == {"epoch", "loss", "valid_map", "valid_ndcg@1"}
    np.testing.assert_array_equal(data["valid_map"], [0.4, np.nan])
    np.testing.assert_array_equal(data["valid_ndcg@1"], [1.0, 1.0])
    # NaN: undefined, as the trainer logs it; Infinity: a DCG beyond float (lightgbm convention, labels
    # near 1023), as the trainer logs it too: both drawn as gaps.
    log.write_text('{"epoch": 1, "loss": 1, "valid_map": NaN, "valid_dcg@5": Infinity}\n')
    data = plots.training_curves(run, tmp_path / "c.png")
    assert math.isnan(data["valid_map"][0]) and data["valid_dcg@5"][0] == math.inf
    for line, key, why in (('{"epoch": NaN, "loss": 1}', "epoch", "expected a finite"),
                           ('{"epoch": 1, "loss": Infinity}', "loss", "expected a finite"),
                           ('{"epoch": 1, "loss": 1, "best_epoch": NaN}', "best_epoch", "expected a finite"),
                           ('{"epoch": 1, "loss": 1, "valid_map": 1' + "0" * 400 + "}", "valid_map",
                            "beyond a float")):
        log.write_text(line + "\n")
        with pytest.raises(DataFormatError, match=rf"metrics\.jsonl:1: '{key}' is .*, {why}"):
            plots.training_curves(run, tmp_path / "bad.png")
    assert not (tmp_path / "bad.png").exists()


@pytest.mark.parametrize(("argv", "option"), [
    (["softrank", "--temperature", "-5"], "--temperature: only for plot figure1, not plot softrank"),
    (["figure2", "--temperature", "0.05"], "--temperature: only for plot figure1"),
    (["figure1", "--temperatures", "1,2"], "--temperatures: only for plot figure2"),
    (["figure1", "--sigma", "3"], "--sigma: only for plot softrank"),
    (["figure1", "--sigma", "0"], "--sigma: only for plot softrank"),  # 0.0 == False: was let through
    (["figure2", "--temperature", "0"], "--temperature: only for plot figure1"),
    (["figure1", "--methods", "foo"], "--methods: only for plot summary and plot forest"),
    (["softrank", "--dataset", "bar"], "--dataset: only for plot summary and plot forest"),
    (["figure2", "--split", "valid"], "--split: only for plot summary and plot forest"),
])
def test_cli_plot_refuses_options_of_other_figures(tmp_path, capsys, argv, option):
    # They were silently ignored: the user believed tau was set while figure2 drew its own.
    assert cli_main(["plot", *argv, "--out", str(tmp_path / "f.png")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("smoothrank: error: ") and option in err, err
    assert not (tmp_path / "f.png").exists()


def test_cli_plot_into_a_device_prints_no_path(tmp_path, capsys):
    # --out /dev/stdout: the path printed after the PNG's bytes corrupted the stream.
    assert cli_main(["plot", "figure1", "--out", os.devnull]) == 0
    assert capsys.readouterr().out == ""
    assert cli_main(["plot", "figure1", "--out", str(tmp_path / "f.png"), "--temperature", "0.5"]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "f.png")
