"""The figures of :mod:`smoothrank.plots`; see the package docstring."""

from __future__ import annotations

import codecs
import csv
import io
import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from smoothrank._atomic import check_destination, is_device_or_fifo, write_bytes_atomic
from smoothrank.errors import DataFormatError, SmoothrankError

__all__ = [
    "neuralndcg_curves",
    "neuralndcg_figure1",
    "neuralndcg_figure2",
    "softrank_example",
    "softrank_figure",
    "summary_bars",
    "summary_convention",
    "summary_forest",
    "training_curves",
]


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise SmoothrankError("plots need the optional dependency matplotlib "
                              "(pip install 'smoothrank[plot]' or pip install matplotlib)") from None

    # Agg: files only, no display needed (servers, CI); set before pyplot is imported.
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _literal(text: object) -> str:
    """``text`` as matplotlib should draw it, verbatim: a ``$`` in a folder or method name would
    otherwise start math text (and an unpaired one is an error), and a lone surrogate (a file name
    that is not UTF-8) cannot be drawn at all."""
    chars = (c if not 0xD800 <= ord(c) <= 0xDFFF else "\ufffd" for c in str(text))
    return "".join(chars).replace("$", r"\$")


def _save(fig: Any, path: str | os.PathLike[str]) -> Path:
    """Save ``fig`` as PNG atomically (temporary file in the same folder, then ``os.replace``)."""
    plt = _pyplot()
    out = check_destination(path)  # a missing folder is an error, as for every other output
    if out.suffix.lower() != ".png" and not is_device_or_fifo(out):  # /dev/null is written in place
        raise SmoothrankError(f"--out: expected a .png file name, got {str(out)!r}")
    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    finally:
        plt.close(fig)
    write_bytes_atomic(out, buffer.getvalue())
    return out


# ------------------------------------------------------------------------------ NeuralNDCG
def neuralndcg_curves(labels: Sequence[float], scores: Sequence[float], xs: np.ndarray, *,
                      temperature: float = 1.0, sinkhorn: bool = True,
                      position: int = -1) -> dict[str, np.ndarray]:
    """NDCG and NeuralNDCG (whole list, exp2 gain, log2 discount) as ``scores[position]`` runs over ``xs``.

    Returns ``{"x", "ndcg", "neural_ndcg"}``; NeuralNDCG is minus
    :func:`smoothrank.losses.neural.neural_ndcg`.
    Computed in float64, one row per x.
    """
    from smoothrank.losses.neural import neural_ndcg
    from smoothrank.metrics import ndcg

    x = np.asarray(xs, dtype=np.float64).reshape(-1)
    s = torch.tensor(scores, dtype=torch.float64).repeat(x.shape[0], 1)
    s[:, position] = torch.from_numpy(x)
    y = torch.tensor(labels, dtype=torch.float64).repeat(x.shape[0], 1)
    exact = ndcg(s, y, reduction="none", gain="exp2", discount="log2").numpy()
    smooth = -neural_ndcg(s, y, reduction="none", temperature=temperature, sinkhorn=sinkhorn).numpy()
    return {"x": x, "ndcg": exact, "neural_ndcg": smooth}


def neuralndcg_figure1(path: str | os.PathLike[str], *, temperature: float = 1.0,
                       xs: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """NeuralNDCG paper Figure 1: y = [2, 1, 0, 0, 0], s = [4, 1, 0, 0, x], x varied.

    Plots NDCG and NeuralNDCG (tau = ``temperature``) with and without Sinkhorn scaling. Returns
    ``{"x", "ndcg", "with_sinkhorn", "without_sinkhorn"}``.
    """
    labels, scores = [2.0, 1.0, 0.0, 0.0, 0.0], [4.0, 1.0, 0.0, 0.0, 0.0]
    x = np.linspace(-2.0, 6.0, 401) if xs is None else np.asarray(xs, dtype=np.float64)
    with_s = neuralndcg_curves(labels, scores, x, temperature=temperature, sinkhorn=True)
    without = neuralndcg_curves(labels, scores, x, temperature=temperature, sinkhorn=False)
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    ax.plot(x, with_s["ndcg"], color="black", lw=2, label="NDCG")
    ax.plot(x, with_s["neural_ndcg"], color="tab:blue", label=f"NeuralNDCG, Sinkhorn (τ={temperature:g})")
    ax.plot(x, without["neural_ndcg"], color="tab:orange", ls="--",
            label=f"NeuralNDCG, no Sinkhorn (τ={temperature:g})")
    ax.set_xlabel("score x of the fifth document")
    ax.set_ylabel("value")
    ax.set_title("y = [2, 1, 0, 0, 0], s = [4, 1, 0, 0, x]")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    _save(fig, path)
    return {"x": x, "ndcg": with_s["ndcg"], "with_sinkhorn": with_s["neural_ndcg"],
            "without_sinkhorn": without["neural_ndcg"]}


def _distinct_names(values: Sequence[float]) -> list[str]:
    """``f"{v:g}"`` of each distinct value; where two would read alike (0.1 and 0.1000001), those two
    get as many more digits as tell them apart (every other name stays as it was)."""
    names = [f"{v:g}" for v in values]
    for digits in range(7, 18):
        clashing = {n for n in names if names.count(n) > 1}
        if not clashing:
            break
        names = [f"{v:.{digits}g}" if n in clashing else n for v, n in zip(values, names, strict=True)]
    return names


def neuralndcg_figure2(path: str | os.PathLike[str], *,
                       temperatures: Sequence[float] = (0.01, 0.1, 0.5, 1.0, 2.0),
                       xs: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """NeuralNDCG paper Figure 2: y = [1, 2, 3, 4, 5], s = [1, 2, 3, 4, x], several temperatures.

    Deterministic NeuralNDCG with Sinkhorn scaling. Returns ``{"x", "ndcg", "tau=<t>": curve, ...}``.
    """
    if not temperatures:
        raise SmoothrankError("temperatures: give at least one temperature")
    temperatures = list(dict.fromkeys(float(t) for t in temperatures))  # a repeat drawn once
    names = _distinct_names(temperatures)
    labels, scores = [1.0, 2.0, 3.0, 4.0, 5.0], [1.0, 2.0, 3.0, 4.0, 0.0]
    x = np.linspace(-1.0, 7.0, 401) if xs is None else np.asarray(xs, dtype=np.float64)
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    out: dict[str, np.ndarray] = {"x": x}
    for t, name in zip(temperatures, names, strict=True):
        curves = neuralndcg_curves(labels, scores, x, temperature=t, sinkhorn=True)
        out["ndcg"] = curves["ndcg"]
        out[f"tau={name}"] = curves["neural_ndcg"]
        ax.plot(x, curves["neural_ndcg"], label=f"NeuralNDCG τ={name}")
    ax.plot(x, out["ndcg"], color="black", lw=2, label="NDCG")
    ax.set_xlabel("score x of the fifth document")
    ax.set_ylabel("value")
    ax.set_title("y = [1, 2, 3, 4, 5], s = [1, 2, 3, 4, x]")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    _save(fig, path)
    return out


# ------------------------------------------------------------------------------ SoftRank
def softrank_example(scores: Sequence[float] = (-0.5, -0.2, 0.4), *,
                     sigma: float = 0.2) -> dict[str, np.ndarray]:
    """Rank distributions ``p[j, r]`` (0-based r, 0 = best) of smoothed scores N(s_j, sigma^2).

    Uses :func:`smoothrank.softrank.soft_rank` (exact Rank-Binomial, SoftRank eqs. 8-12).
    Returns ``{"scores", "sigma", "rank_probs"}``.
    """
    from smoothrank.softrank import soft_rank

    s = torch.tensor([list(scores)], dtype=torch.float64)
    p = soft_rank(s, sigma=sigma, method="exact")[0].numpy()
    return {"scores": s[0].numpy(), "sigma": np.asarray(sigma), "rank_probs": p}


def softrank_figure(path: str | os.PathLike[str], *, scores: Sequence[float] = (-0.5, -0.2, 0.4),
                    sigma: float = 0.2, long_scores: Sequence[float] | None = None,
                    long_sigma: float = 1.0, document: int = 2) -> dict[str, np.ndarray]:
    """SoftRank Figures 2 and 3 in one PNG.

    Top row (Figure 2): the smoothed score densities N(s_j, sigma^2) of three documents and the
    rank distribution of each. Bottom row (Figure 3): for document ``document`` of a 10-item list,
    its rank distribution p(r) and the discount distribution p(d) obtained by mapping r through
    D(r) = 1 / log2(2 + r) (0-based r); the expectation E[D] is the soft discount of SoftNDCG
    (eq. 15). Returns the plotted arrays.
    """
    from smoothrank.softrank import soft_rank

    small = softrank_example(scores, sigma=sigma)
    long = np.linspace(-1.0, 1.5, 10) if long_scores is None else np.asarray(long_scores, dtype=np.float64)
    if not 0 <= document < long.shape[0]:
        raise SmoothrankError(f"document: expected an index in [0, {long.shape[0]}), got {document}")
    p_long = soft_rank(torch.tensor(long[None, :], dtype=torch.float64), sigma=long_sigma)[0].numpy()
    ranks = np.arange(long.shape[0])
    discounts = 1.0 / np.log2(ranks + 2.0)
    p_rank = p_long[document]
    expected_discount = float((p_rank * discounts).sum())

    plt = _pyplot()
    n = small["rank_probs"].shape[0]
    fig, axes = plt.subplots(2, n + 1, figsize=(3.0 * (n + 1), 6.0))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    grid = np.linspace(min(scores) - 4 * sigma, max(scores) + 4 * sigma, 400)
    ax = axes[0, 0]
    for j, s in enumerate(small["scores"]):
        with np.errstate(over="ignore"):  # a tiny sigma: the square overflows, exp(-inf) is the 0 wanted
            density = np.exp(-0.5 * ((grid - s) / sigma) ** 2) / (sigma * math.sqrt(2 * math.pi))
        ax.plot(grid, density, color=colours[j % len(colours)], label=f"s{j + 1}")
    ax.set_xlabel("score s")
    ax.set_ylabel("p(s)")
    ax.set_title(f"smoothed scores (σ={sigma:g})")
    ax.legend(fontsize=8)
    for j in range(n):
        ax = axes[0, j + 1]
        ax.bar(np.arange(n), small["rank_probs"][j], color=colours[j % len(colours)])
        ax.set_xticks(np.arange(n))
        ax.set_ylim(0, 1)
        ax.set_xlabel(f"rank r{j + 1} (0 = best)")
        ax.set_ylabel(f"p(r{j + 1})")
    ax = axes[1, 0]
    ax.bar(ranks, p_rank, color="tab:blue")
    ax.set_xticks(ranks)
    ax.set_xlabel("rank r (0 = best)")
    ax.set_ylabel("p(r)")
    ax.set_title(f"document {document + 1} of {long.shape[0]} (σ={long_sigma:g})")
    ax = axes[1, 1]
    ax.stem(discounts, p_rank, basefmt=" ")
    ax.axvline(expected_discount, color="tab:red", ls="--", label=f"E[D] = {expected_discount:.3f}")
    ax.set_xlim(0, 1.05)
    ax.set_xlabel("discount d = D(r)")
    ax.set_ylabel("p(d)")
    ax.legend(fontsize=8)
    ax = axes[1, 2] if n >= 2 else None
    if ax is not None:
        ax.plot(ranks, discounts, marker="o", color="black")
        ax.set_xlabel("rank r")
        ax.set_ylabel("D(r) = 1/log2(2 + r)")
    for extra in axes[1, 3:]:
        extra.axis("off")
    fig.suptitle("SoftRank: smoothed scores → rank distributions → discount distribution")
    fig.tight_layout()
    _save(fig, path)
    return {**small, "long_scores": long, "long_rank_probs": p_long, "discounts": discounts,
            "expected_discount": np.asarray(expected_discount)}


# ------------------------------------------------------------------------------ runs
def _read_text(path: Path) -> str:
    """The UTF-8 text of ``path`` (a byte-order mark, which spreadsheet programs write, is dropped);
    other bytes are a :class:`DataFormatError` naming the line."""
    data = path.read_bytes().removeprefix(codecs.BOM_UTF8)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise DataFormatError(f"{path}:{line}: not UTF-8 text (byte {data[err.start]:#04x})") from None


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    for number, line in enumerate(_read_text(path).splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            raise DataFormatError(f"{path}:{number}: not a JSON object ({err.msg})") from None
        if not isinstance(row, dict) or "epoch" not in row:
            raise DataFormatError(f"{path}:{number}: expected a JSON object with an 'epoch' key")
        # The values drawn: numbers, or null for a metric a convention left undefined. Epochs and the
        # loss are finite; a metric may be NaN (undefined) or infinite (DCG of labels near the gain's
        # limit under the lightgbm convention), both drawn as gaps.
        for key, value in row.items():
            if not _drawn(key):
                continue
            number_like = isinstance(value, int | float) and not isinstance(value, bool)
            if not (number_like or (value is None and key != "epoch")):
                raise DataFormatError(f"{path}:{number}: {key!r} is {_shorten(value)}, expected a number")
            if number_like and not _fits_float(value):
                raise DataFormatError(f"{path}:{number}: {key!r} is {_shorten(value)}, beyond a float")
            if number_like and key in ("epoch", "best_epoch", "loss") and not math.isfinite(value):
                raise DataFormatError(f"{path}:{number}: {key!r} is {value!r}, expected a finite number")
        rows.append(row)
    if not rows:
        raise DataFormatError(f"{path}: no epochs logged yet")
    return rows


def _fits_float(value: float) -> bool:
    """Whether a JSON number converts to a float (an integer of 400 digits does not)."""
    try:
        float(value)
    except OverflowError:
        return False
    return True


def _shorten(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


_METRIC_PREFIXES = ("valid_", "train_")  # the metrics of a metrics.jsonl row


def _drawn(key: str) -> bool:
    """Whether ``training_curves`` draws a ``metrics.jsonl`` key (the epoch, the loss, the metrics)."""
    return key in ("epoch", "loss", "best_epoch") or key.startswith(_METRIC_PREFIXES)


def _metric_keys(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The metrics logged in any epoch (a metric undefined in the last one is drawn all the same)."""
    keys = (k for row in rows for k, v in row.items()
            if k.startswith(_METRIC_PREFIXES) and isinstance(v, int | float) and not isinstance(v, bool))
    return list(dict.fromkeys(keys))


def find_metrics_log(run_dir: str | os.PathLike[str]) -> Path:
    """``metrics.jsonl`` of a trainer run directory, or of an experiment run (``<run>/train/``)."""
    root = Path(run_dir)
    if root.is_file():
        return root
    for candidate in (root / "metrics.jsonl", root / "train" / "metrics.jsonl"):
        if candidate.is_file():
            return candidate
    if not root.exists():
        raise FileNotFoundError(2, "No such file or directory", str(root))
    raise SmoothrankError(f"{root}: no metrics.jsonl (not a training run directory)")


def training_curves(run_dir: str | os.PathLike[str], path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """Training loss (left) and validation metrics (right) per epoch; the selected epoch is marked."""
    log = find_metrics_log(run_dir)
    rows = _read_jsonl(log)
    epochs = np.asarray([r["epoch"] for r in rows], dtype=np.float64)

    def column(key: str) -> np.ndarray:
        return np.asarray([r.get(key, math.nan) if r.get(key) is not None else math.nan for r in rows],
                          dtype=np.float64)

    out: dict[str, np.ndarray] = {"epoch": epochs, "loss": column("loss")}
    metric_keys = _metric_keys(rows)
    for key in metric_keys:
        out[key] = column(key)
    best = rows[-1].get("best_epoch")
    plt = _pyplot()
    fig, (ax_loss, ax_metric) = plt.subplots(1, 2, figsize=(10.0, 3.8))
    from matplotlib.ticker import MaxNLocator

    def drawn(values: np.ndarray) -> np.ndarray:  # an infinite metric is a gap, as an undefined one
        return np.where(np.isfinite(values), values, math.nan)

    ax_loss.plot(epochs, out["loss"], marker=".", color="tab:red")
    for ax in (ax_loss, ax_metric):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax_loss.set_xlabel("epoch")
    ax_loss.set_ylabel("training loss")
    ax_loss.grid(alpha=0.3)
    for key in metric_keys:
        ax_metric.plot(epochs, drawn(out[key]), marker=".", label=_literal(key))
    ax_metric.set_xlabel("epoch")
    ax_metric.set_ylabel("metric")
    ax_metric.grid(alpha=0.3)
    if best:
        for ax in (ax_loss, ax_metric):
            ax.axvline(best, color="grey", ls=":", label="selected epoch")
    if metric_keys or best:  # after the epoch line, so that the legend lists it
        ax_metric.legend(fontsize=8)
    fig.suptitle(_literal(f"training curves: {log.parent}"))
    fig.tight_layout()
    _save(fig, path)
    return out


def _summary_table(summary_csv: str | os.PathLike[str], *, dataset: str | None, split: str,
                   metrics: Sequence[str] | None, methods: Sequence[str] | None
                   ) -> tuple[str, list[str], list[str], np.ndarray, np.ndarray, str | None]:
    """``(dataset, metrics, methods, mean, std, convention)`` of one dataset and split of a
    ``summary.csv`` (convention: :func:`summary_convention`)."""
    csv_path = Path(summary_csv)
    rows = read_summary_rows(csv_path)
    convention = _rows_convention(csv_path, rows)  # before the rows are narrowed to one dataset and split
    datasets = list(dict.fromkeys(r["dataset"] for r in rows))
    if not datasets:
        raise DataFormatError(f"{csv_path}: no rows")
    chosen = dataset if dataset is not None else datasets[0]
    if chosen not in datasets:
        raise SmoothrankError(f"--dataset: {chosen!r} is not in {csv_path}; it has {datasets}")
    rows = [r for r in rows if r["dataset"] == chosen and r["split"] == split]
    if not rows:
        raise SmoothrankError(f"{csv_path}: no {split!r} rows for dataset {chosen!r}")
    available = list(dict.fromkeys(r["method"] for r in rows))
    names = list(dict.fromkeys(r["metric"] for r in rows))
    for option, wanted, have in (("--methods", methods, available), ("--metrics", metrics, names)):
        unknown = [w for w in wanted or [] if w not in have]
        if unknown:
            raise SmoothrankError(f"{option}: {unknown} not in {csv_path} ({chosen}, {split}); it has {have}")
    names = list(dict.fromkeys(metrics)) if metrics else names  # a repeat drawn once
    chosen_methods = list(dict.fromkeys(methods)) if methods else available
    index = {(r["method"], r["metric"]): r for r in rows}

    def value(method: str, metric: str, key: str) -> float:
        row = index.get((method, metric))
        return _cell(csv_path, row, key) if row is not None else math.nan

    means = np.asarray([[value(m, k, "mean") for k in names] for m in chosen_methods])
    stds = np.asarray([[value(m, k, "std") for k in names] for m in chosen_methods])
    return chosen, names, chosen_methods, means, stds, convention


def summary_convention(summary_csv: str | os.PathLike[str]) -> str | None:
    """The metric convention (letor4, lightgbm, trec) of an experiment ``summary.csv``: its
    ``convention`` column; for a file written before that column existed, the ``convention`` of the
    experiment's ``spec.yaml`` beside it (letor4, the spec default, when the spec names none);
    None when neither is there."""
    csv_path = Path(summary_csv)
    return _rows_convention(csv_path, read_summary_rows(csv_path))


def _rows_convention(csv_path: Path, rows: Sequence[Mapping[str, Any]]) -> str | None:
    found = sorted({row["convention"] for row in rows if row.get("convention")})
    if found:
        return ", ".join(found)  # one experiment, one convention: several only in a hand-merged file
    spec = csv_path.parent / "spec.yaml"
    if not spec.is_file():
        return None
    from smoothrank.training.config import read_config_file  # UTF-8 (BOM too), duplicate keys refused

    return str(read_config_file(spec).get("convention", "letor4"))


def _convention_line(convention: str | None) -> str:
    """The figure subtitle that names the metric convention of the values drawn."""
    return f"metric convention: {convention or 'not recorded'}"


_SUMMARY_COLUMNS = {"dataset", "method", "split", "metric", "mean", "std"}
_LINE = "__line__"  # the key under which read_summary_rows keeps each row's line number


def read_summary_rows(summary_csv: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The rows of an experiment ``summary.csv``, each with its line number under ``_LINE``.

    A damaged file is refused, naming the line, rather than drawn: a row with more or fewer fields
    than the header (a truncated file, a quote left open), or a second row for one (dataset, method,
    split, metric), which would silently replace the first."""
    csv_path = Path(summary_csv)
    # strict: a quote still open at the end of the file is an error, not one field holding the rest
    reader = csv.DictReader(io.StringIO(_read_text(csv_path), newline=""), strict=True)
    missing = _SUMMARY_COLUMNS - set(reader.fieldnames or [])
    if missing:
        raise DataFormatError(f"{csv_path}:1: not an experiment summary "
                              f"(missing columns {sorted(missing)})")
    rows: list[dict[str, Any]] = []
    seen: dict[tuple[str, ...], int] = {}
    # A record's first line (a quoted field may span lines; reader.line_num is the record's last
    # line, and it stays at the last good record when the next one is not CSV).
    line = reader.line_num + 1
    try:
        for row in reader:
            if None in row or None in row.values():  # DictReader's marks of extra and of missing fields
                raise DataFormatError(f"{csv_path}:{line}: {len(reader.fieldnames or [])} fields expected "
                                      f"(the header's), got another number; is the file truncated?")
            key = tuple(row[k] for k in ("dataset", "method", "split", "metric"))
            if key in seen:
                raise DataFormatError(f"{csv_path}:{line}: a second row for dataset, method, split, metric "
                                      f"{list(key)} (the first is on line {seen[key]})")
            if any(row.values()):  # a row of commas only, as spreadsheet programs leave, is no row
                seen[key] = line
                rows.append({**row, _LINE: line})
            line = reader.line_num + 1
    except csv.Error as err:
        raise DataFormatError(f"{csv_path}:{line}: not CSV ({err}, in the record from here)") from None
    return rows


def _cell(csv_path: Path, row: Mapping[str, Any], key: str) -> float:
    """A number of a summary row: an empty std means unknown (NaN; a single fold has none); anything
    else must be a finite number (and a std non-negative), or the error names file, line and column.
    An empty mean is an error: the runner writes no row without a value, and a bar drawn at 0 would
    look like a score."""
    text = row.get(key)
    where = f"{csv_path}:{row[_LINE]}: column {key!r}"
    if text in ("", None):
        if key == "mean":
            raise DataFormatError(f"{where}: empty (a row needs its mean)")
        return math.nan
    try:
        number = float(text)
    except ValueError:
        raise DataFormatError(f"{where}: not a number: {text[:40]!r}") from None
    if not math.isfinite(number):
        raise DataFormatError(f"{where}: not a finite number: {text!r}")
    if key == "std" and number < 0:
        raise DataFormatError(f"{where}: a negative standard deviation: {text!r}")
    return number


def summary_bars(summary_csv: str | os.PathLike[str], path: str | os.PathLike[str], *,
                 dataset: str | None = None, split: str = "test",
                 metrics: Sequence[str] | None = None,
                 methods: Sequence[str] | None = None) -> dict[str, Any]:
    """Grouped bars: mean ± std over folds of each method, one group per metric, from ``summary.csv``;
    the title names the metric convention (:func:`summary_convention`)."""
    chosen, names, methods, means, stds, convention = _summary_table(
        summary_csv, dataset=dataset, split=split, metrics=metrics, methods=methods)
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(min(14.0, max(6.0, 0.22 * len(names) * len(methods) + 2.0)), 4.2))
    width = 0.8 / len(methods)
    centres = np.arange(len(names))
    # tab20 keeps 20 methods distinguishable (the default cycle repeats after 10); beyond that the
    # colours repeat with a hatch, so up to 80 methods stay distinguishable.
    colours = plt.get_cmap("tab20").colors
    hatches = ("", "///", "...", "xxx")
    for i, method in enumerate(methods):
        # No error bar where the spread is unknown (a single fold), and no bar (rather than one at 0,
        # which would read as a score) for a metric the summary has no row of for this method.
        errors = stds[i] if np.isfinite(stds[i]).any() else None
        ax.bar(centres + (i - (len(methods) - 1) / 2) * width, means[i], width,
               yerr=None if errors is None else np.nan_to_num(errors), capsize=2, label=_literal(method),
               color=colours[i % len(colours)], hatch=hatches[(i // len(colours)) % len(hatches)],
               edgecolor="white" if i >= len(colours) else None)
    ax.set_xticks(centres)
    ax.set_xticklabels([_literal(name) for name in names])
    ax.set_ylabel(f"{split} mean ± std over folds")
    ax.set_title(_literal(f"{chosen}: {split} set\n{_convention_line(convention)}"))
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    _save(fig, path)
    return {"methods": methods, "metrics": names, "mean": means, "std": stds, "convention": convention}


def summary_forest(summary_csv: str | os.PathLike[str], path: str | os.PathLike[str], *,
                   dataset: str | None = None, split: str = "test", metrics: Sequence[str] | None = None,
                   methods: Sequence[str] | None = None,
                   references: Mapping[str, Mapping[str, float]] | None = None) -> dict[str, Any]:
    """Forest plot: one panel per metric, each method's mean (dot) ± std over folds (bar), on an
    axis zoomed to the values, with ``references`` (e.g. the published LETOR 4.0 rows:
    ``{name: {metric: value}}``) as vertical lines. Bars from zero hide differences of 0.005
    between methods; this plot shows them, and how they compare with the fold-to-fold spread.
    The title names the metric convention (:func:`summary_convention`)."""
    chosen, names, methods, means, stds, convention = _summary_table(
        summary_csv, dataset=dataset, split=split, metrics=metrics, methods=methods)
    refs = {name: dict(values) for name, values in (references or {}).items()}
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(names), sharey=True, squeeze=False,
                             figsize=(max(6.0, 3.0 * len(names) + 2.5), max(2.5, 0.28 * len(methods) + 1.4)))
    ys = np.arange(len(methods))[::-1]  # first method on top
    styles = ("--", ":", "-.", (0, (5, 1)), (0, (3, 1, 1, 1)), (0, (1, 3)))
    colours = plt.get_cmap("tab10").colors
    labelled: set[str] = set()
    for j, (ax, metric) in enumerate(zip(axes[0], names, strict=True)):
        ok = np.isfinite(means[:, j])
        err = np.where(np.isfinite(stds[:, j]), stds[:, j], 0.0)
        ax.errorbar(means[ok, j], ys[ok], xerr=err[ok], fmt="o", ms=4, color="black", ecolor="0.7",
                    elinewidth=1.0, capsize=2)
        for r, (name, values) in enumerate(refs.items()):
            if metric in values:  # labelled once, in the first panel that has it, for the legend
                ax.axvline(values[metric], color=colours[r % len(colours)], ls=styles[r % len(styles)],
                           lw=1.2, label=None if name in labelled else _literal(name))
                labelled.add(name)
        ax.set_title(_literal(metric))
        ax.grid(axis="x", alpha=0.3)
    axes[0][0].set_yticks(ys)
    axes[0][0].set_yticklabels([_literal(m) for m in methods], fontsize=8)
    fig.suptitle(_literal(f"{chosen}: {split} set, mean ± std over folds\n{_convention_line(convention)}"))
    if refs:
        fig.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 0.9), frameon=False)
    fig.tight_layout()
    _save(fig, path)
    return {"methods": methods, "metrics": names, "mean": means, "std": stds, "references": refs,
            "convention": convention}
