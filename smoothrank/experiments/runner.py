"""Run an experiment grid: one run per cell, one ``result.json`` per run, resumable, optionally parallel.

Layout of the output folder::

    OUT/spec.yaml                         the validated spec (as given)
    OUT/runs/<run id>/result.json         written last and atomically: a run is finished iff it exists
    OUT/runs/<run id>/scores.npz          the selected model's scores (float64 per split, row order)
    OUT/runs/<run id>/valid.pred, test.pred   the same scores as LETOR prediction files: one score
                                          per line, in the data file's line order (the input of the
                                          LETOR evaluation scripts and ``smoothrank evaluate``)
    OUT/runs/<run id>/model.txt | model.json  a GBDT run's booster in its library's own format
                                          (LightGBM text, XGBoost JSON), cut at the selected
                                          iteration: ``smoothrank predict`` scores new data with it
    OUT/runs/<run id>/train/              the trainer's run directory (neural runs: metrics.jsonl,
                                          checkpoint.pt, model.pt, ...)
    OUT/ensembles/<ensemble id>/          seed ensembles (``ensemble: true``) and blends (``blends:``),
                                          built after the runs:
                                          see :mod:`smoothrank.experiments.ensemble`
    OUT/summary.md, summary.csv, summary.json   see :mod:`smoothrank.experiments.report`

Protocol of every run: fit on the training split, select on the validation split only (the
trainer's best epoch by ``select_by``; the booster's early-stopping iteration), then score the
selected model once on the training, validation and test splits under the spec's convention.
The per-query test values are kept for the paired t-test.

With ``refit: true`` in the spec, a run then trains a second model from scratch (same seed and
settings) on the training and validation queries together, for the selected number of epochs or
boosting rounds, without selection. Its scores are the run's training and test scores; the
validation scores (and metrics) stay those of the selected model, which never saw those queries,
so configurations, epochs and learned blend weights are still chosen out of sample.
``result.json`` keeps the selected model's own test and training metrics under
``refit.without_refit``. The refit trainer's files are in ``OUT/runs/<run id>/refit/``.

Resuming: a cell whose ``result.json`` exists with the same fingerprint is skipped; one with a
different fingerprint (the spec changed) is an error, so stale results are never mixed in. A
neural run interrupted mid-training continues from the trainer's last checkpoint.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import multiprocessing
import os
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from smoothrank.errors import ConfigError, SmoothrankError
from smoothrank.experiments.results import RESULT_FILE, SCORES_FILE, score_splits, write_json, write_scores
from smoothrank.experiments.spec import Cell, ExperimentSpec

__all__ = ["PLAN_FILE", "RESULT_FILE", "ExperimentOutcome", "check_out_dir", "load_results", "read_result",
           "run_cell", "run_experiment", "write_json"]

CELL_FILE = "cell.json"  # a neural run's identity, written when it starts
PLAN_FILE = "plan.json"  # the run and ensemble ids of the last experiment written into a folder
SPLITS = ("train", "valid", "test")


# ------------------------------------------------------------------------------ one run
def _selector(valid: Any, metric: str, convention: str) -> Callable[[np.ndarray], float]:
    """The validation criterion of model selection: mean ``metric`` under ``convention``."""
    from smoothrank.metrics import evaluate_flat, mean_metrics

    def value(scores: np.ndarray) -> float:
        per_query = evaluate_flat(scores, valid.labels, offsets=valid.offsets, metrics=[metric],
                                  convention=convention, doc_ids=valid.doc_ids)
        return mean_metrics(per_query)[metric]

    return value


_Ran = tuple[dict[str, Any], dict[str, np.ndarray], dict[str, Any]]  # result body, scores, splits


def _run_gbdt(cell: Cell, run_dir: Path) -> _Ran:
    from smoothrank.datasets import load_splits
    from smoothrank.experiments.gbdt import fit_gbdt, save_booster

    s = cell.settings
    splits = load_splits(s["data"], missing_ok=True)  # null_value "nan": NULLs stay missing
    g = s["gbdt"]
    select = None
    if splits.get("valid") is not None and g.get("select") == "spec":
        select = _selector(splits["valid"], s["select_by"], s["convention"])
    fitted = fit_gbdt(splits["train"], splits.get("valid"), library=g["library"], objective=g["objective"],
                      params=g["params"], num_boost_round=g["num_boost_round"],
                      early_stopping_rounds=g["early_stopping_rounds"], eval_at=g["eval_at"], seed=cell.seed,
                      num_threads=s["num_threads"], select=select,
                      select_name=f"{s['convention']}_{s['select_by']}", loss_options=g.get("options"),
                      hessian=g.get("hessian", "constant"), min_hessian=g.get("min_hessian"))
    scores = {name: fitted.predict(ds) for name, ds in splits.items()}
    selection = {"best_iteration": fitted.best_iteration, "rounds_run": fitted.rounds_run,
                 "history": fitted.history}
    if s.get("refit"):
        merged = _refit_training_set(splits)
        refitted = fit_gbdt(merged, None, library=g["library"], objective=g["objective"], params=g["params"],
                            num_boost_round=fitted.best_iteration, early_stopping_rounds=None,
                            eval_at=g["eval_at"], seed=cell.seed, num_threads=s["num_threads"],
                            loss_options=g.get("options"), hessian=g.get("hessian", "constant"),
                            min_hessian=g.get("min_hessian"))
        refit = {"rounds": fitted.best_iteration, "train_queries": merged.n_queries}
        save_booster(refitted, run_dir)  # the model that gave the test scores
        return (*_with_refit(scores, {n: refitted.predict(splits[n]) for n in ("train", "test")}, splits,
                             selection, refit, metrics=s["metrics"], convention=s["convention"]), splits)
    save_booster(fitted, run_dir)
    scored = score_splits(scores, splits, metrics=s["metrics"], convention=s["convention"])
    return {**scored, "selection": selection}, scores, splits


def _refit_training_set(splits: dict[str, Any]) -> Any:
    from smoothrank.data import concat_datasets
    from smoothrank.data.missing import WithMissing

    if splits.get("valid") is None:  # the spec check refuses this; a direct caller gets it here
        raise ConfigError("refit: the dataset has no validation split to refit on")
    parts = [splits["train"], splits["valid"]]
    if not any(isinstance(p, WithMissing) for p in parts):
        return concat_datasets(parts)
    # NULLs kept missing: the filled datasets joined, and their missing positions.
    filled = [p.dataset if isinstance(p, WithMissing) else p for p in parts]
    missing = [p.missing if isinstance(p, WithMissing) else np.zeros(p.features.shape, bool) for p in parts]
    return WithMissing(concat_datasets(filled), np.concatenate(missing))


def _with_refit(selected: dict[str, np.ndarray], refitted: dict[str, np.ndarray], splits: dict[str, Any],
                selection: dict[str, Any], refit: dict[str, Any], *, metrics: Sequence[str],
                convention: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """The result body and scores of a refit run: training and test scores from the refit model,
    validation scores from the selected model (out of sample), and the selected model's own
    training and test metrics under ``refit.without_refit``."""
    scores = {**selected, **refitted}
    scored = score_splits(scores, splits, metrics=metrics, convention=convention)
    before = score_splits({n: selected[n] for n in refitted}, splits, metrics=metrics, convention=convention)
    return {**scored, "selection": selection, "refit": {**refit, "without_refit": before["metrics"]}}, scores


def _run_neural(cell: Cell, run_dir: Path, *, quiet: bool = True) -> _Ran:
    from smoothrank.datasets import load_splits
    from smoothrank.training import load_model, train
    from smoothrank.training.config import SCHEDULE_OPTIONS, config_from_dict
    from smoothrank.training.trainer import warn_short_epochs

    # probe_loss=False: the spec check probed the loss options already, once for the whole grid, and
    # checked the schedule options knowing which the loss's overrides inherited (SCHEDULE_OPTIONS).
    config = config_from_dict(cell.settings["config"], source=f"run {cell.run_id}", probe_loss=False,
                              inherited_schedule=SCHEDULE_OPTIONS)
    _check_interrupted(cell, run_dir)  # also when called without check_out_dir (the Python API)
    splits = load_splits(cell.settings["config"]["data"])
    warn_short_epochs(splits["train"].n_queries, config.training.batch_size)
    train_dir = run_dir / "train"
    resume = (train_dir / "checkpoint.pt").is_file()
    if not resume:  # what this run is, before its first checkpoint: a resume is checked against it
        run_dir.mkdir(parents=True, exist_ok=True)
        write_json(run_dir / CELL_FILE, {"run_id": cell.run_id, "fingerprint": cell.fingerprint(),
                                         "identity": cell.identity()})
    # The test split is withheld from the trainer: it is scored once below, after selection.
    fit_splits = {k: v for k, v in splits.items() if k != "test"}
    result = train(config, run_dir=train_dir, resume=resume, quiet=quiet, splits=fit_splits)
    model = load_model(train_dir / "model.pt")  # the selected model with its fitted transforms
    scores = {name: model.score(ds) for name, ds in splits.items()}
    selection = {"best_epoch": result.best_epoch, "epochs_run": len(result.history), "resumed": resume}
    metrics, convention = cell.settings["metrics"], cell.settings["convention"]
    if cell.settings.get("refit"):
        merged = _refit_training_set(splits)
        refit_dict = copy.deepcopy(cell.settings["config"])
        refit_dict["training"]["epochs"] = result.best_epoch
        refit_dict["training"]["early_stopping_patience"] = None  # no validation split: the epochs are fixed
        refit_config = config_from_dict(refit_dict, source=f"refit of run {cell.run_id}", probe_loss=False,
                                        inherited_schedule=SCHEDULE_OPTIONS)
        refit_dir = run_dir / "refit"
        train(refit_config, run_dir=refit_dir, resume=(refit_dir / "checkpoint.pt").is_file(), quiet=quiet,
              splits={"train": merged})
        refitted = load_model(refit_dir / "model.pt")  # no validation split: the last epoch
        refit = {"epochs": result.best_epoch, "train_queries": merged.n_queries}
        return (*_with_refit(scores, {n: refitted.score(splits[n]) for n in ("train", "test")}, splits,
                             selection, refit, metrics=metrics, convention=convention), splits)
    scored = score_splits(scores, splits, metrics=metrics, convention=convention)
    return {**scored, "selection": selection}, scores, splits


def _write_prediction_files(run_dir: Path, scores: dict[str, np.ndarray], splits: dict[str, Any],
                            data: dict[str, Any]) -> dict[str, Any]:
    """``valid.pred`` and ``test.pred`` (one score per line, the data file's line order); returns
    what ``result.json`` records of them: each file's name, its split, and the run's ``data``
    section (file paths made absolute) to read that split with, as ``smoothrank evaluate OUT`` does."""
    from smoothrank.data import write_predictions

    section = {k: (str(Path(v).resolve()) if k in SPLITS and isinstance(v, str) else v)
               for k, v in data.items()}
    written: dict[str, Any] = {}
    for split in ("valid", "test"):
        if split in scores and splits.get(split) is not None:
            name = f"{split}.pred"
            write_predictions(run_dir / name, scores[split], dataset=splits[split])
            written[split] = {"file": name, "split": split, "data": section}
    return written


def run_cell(cell: Cell, out_dir: str | Path) -> dict[str, Any]:
    """Run one cell and write ``OUT/runs/<run id>/scores.npz`` then ``result.json``; return the result."""
    run_dir = Path(out_dir) / "runs" / cell.run_id
    started = time.perf_counter()
    run_dir.mkdir(parents=True, exist_ok=True)
    body, scores, splits = _run_gbdt(cell, run_dir) if cell.kind == "gbdt" else _run_neural(cell, run_dir)
    write_scores(run_dir / SCORES_FILE, scores)  # before result.json: a finished run has its scores
    data = cell.settings["data"] if cell.kind == "gbdt" else cell.settings["config"]["data"]
    body["predictions"] = _write_prediction_files(run_dir, scores, splits, data)
    result = {"run_id": cell.run_id, "dataset": cell.dataset, "fold": cell.fold, "method": cell.method,
              "kind": cell.kind, "seed": cell.seed, "fingerprint": cell.fingerprint(),
              "convention": cell.settings["convention"], "seconds": round(time.perf_counter() - started, 3),
              **body}
    write_json(run_dir / RESULT_FILE, result)
    return result


_Caught = list[tuple[type[Warning], str]]


def _run_cell_noting_warnings(cell: Cell, out_dir: str | Path) -> tuple[dict[str, Any], _Caught]:
    """:func:`run_cell`, and the warnings it gave (category, message), to be shown by the caller."""
    with warnings.catch_warnings(record=True) as caught:
        result = run_cell(cell, out_dir)
    return result, [(w.category, str(w.message)) for w in caught]


def _show_warnings(run_id: str, caught: _Caught) -> None:
    """Warnings of a run, given again in this process and naming the run: a worker's own would
    be printed by the worker, in Python's long form, between other runs' lines."""
    for category, message in caught:
        warnings.warn(f"{run_id}: {message}", category, stacklevel=2)


def _run_cell_worker(cell_json: str, out_dir: str) -> tuple[dict[str, Any], _Caught]:
    # Process-pool entry point: cells travel as JSON so the child rebuilds them by validation.
    cell = Cell.model_validate_json(cell_json)
    _worker_state["in_run"] = True
    try:
        return _run_cell_noting_warnings(cell, out_dir)
    except KeyboardInterrupt:
        # Ctrl-C reaches the workers too. concurrent.futures would hand the interrupt back as this
        # run's outcome and start the next queued run, so the grid would go on (and the parent's
        # shutdown would wait for it). Leave at once: the run's checkpoint is already on disk.
        os._exit(130)
    finally:
        _worker_state["in_run"] = False


_worker_state = {"in_run": False, "stopping": False}

# Seconds a worker has to leave after its first SIGINT or SIGTERM, or after its parent's death,
# before the kernel ends it (SIGALRM, whose default action ends the process).
_STOP_DEADLINE_S = 5.0
_PARENT_POLL_S = 0.5


def _worker_signals(parent: int) -> None:
    """Pool initializer: SIGINT and SIGTERM stop a worker once, cleanly, and within
    ``_STOP_DEADLINE_S`` seconds in any case; the worker ends when ``parent`` (the pid of the
    process that made the pool, passed on: ``os.getppid()`` here would already be another process's
    if the parent died while this one started) does.

    In a run, the first signal raises KeyboardInterrupt, so that temporary files are removed before
    ``_run_cell_worker`` leaves; between runs the worker leaves at once (a KeyboardInterrupt there
    would be a traceback from concurrent.futures). Later ones are ignored: Ctrl-C reaches a worker
    twice, from the terminal and from the parent (:func:`_interrupt_workers`), and the second must
    not cut the first one's clean-up short. SIGTERM to the whole process group (a scheduler
    cancelling the job) would otherwise kill the worker on the spot.

    The first signal also sets a deadline that the kernel keeps: the KeyboardInterrupt can be lost
    (Python prints an exception raised inside a ``__del__``, a weakref callback or a ctypes callback
    as "Exception ignored" and goes on; Numba compiling or loading its kernels runs llvmlite's
    ``__del__`` and ctypes callbacks: ``benchmarks/interrupt_probe.py``), and the signal itself can
    wait, unhandled, for a long compiled call to return."""
    signal.signal(signal.SIGINT, _worker_interrupted)
    signal.signal(signal.SIGTERM, _worker_interrupted)
    if hasattr(signal, "SIGALRM"):
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
    _end_with_parent(parent)


def _set_stop_deadline() -> None:
    """End this process ``_STOP_DEADLINE_S`` seconds from now, whatever it is doing then (a deadline
    set already is kept, not extended). Callable from any thread."""
    if hasattr(signal, "setitimer"):
        if signal.getitimer(signal.ITIMER_REAL)[0] == 0.0:
            signal.setitimer(signal.ITIMER_REAL, _STOP_DEADLINE_S)
        return

    def end() -> None:  # no interval timer (Windows): a thread ends the process
        time.sleep(_STOP_DEADLINE_S)
        os._exit(130)

    threading.Thread(target=end, name="smoothrank-stop-deadline", daemon=True).start()


def _end_with_parent(parent: int) -> None:
    """Make this worker end when its parent process does, however the parent ends (SIGKILL too,
    where no handler of the parent runs). On Linux the kernel sends SIGTERM at the parent's death
    (``prctl(PR_SET_PDEATHSIG)``: at once, while the main thread may be in a compiled call); on
    every system a daemon thread polls the parent's pid and, once it has changed, sets the stop
    deadline and sends SIGTERM. The worker then stops as for a SIGTERM: its run's checkpoint
    stays, for the next command to resume."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # 1 = PR_SET_PDEATHSIG
        except (OSError, AttributeError):  # no libc symbol: the thread below does it
            pass

    def watch() -> None:
        while os.getppid() == parent:  # a parent that died before prctl is seen at once
            time.sleep(_PARENT_POLL_S)
        _set_stop_deadline()
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="smoothrank-parent-watch", daemon=True).start()


def _worker_interrupted(_signum: int, _frame: object) -> None:
    if _worker_state["stopping"]:
        return
    _worker_state["stopping"] = True
    if not _worker_state["in_run"]:
        os._exit(130)
    if hasattr(signal, "SIGALRM"):
        signal.signal(signal.SIGALRM, signal.SIG_DFL)  # a library may have set a handler since
    _set_stop_deadline()
    raise KeyboardInterrupt


def _interrupt_workers() -> None:
    """Pass an interrupt of this process on to its worker processes.

    Ctrl-C in a terminal reaches the whole process group, but ``kill -INT``, ``kill`` (SIGTERM) or
    a container's stop reach this process only, and the workers would go on with their runs after
    the command has returned. A worker that already has one ignores the second."""
    if os.name != "posix":
        return
    for child in multiprocessing.active_children():
        if child.pid is None:  # not started
            continue
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signal.SIGINT)


# ------------------------------------------------------------------------------ the grid
def _run_in_pool(todo: Sequence[Cell], out: Path, workers: int, done: dict[str, dict[str, Any]],
                 ran: list[str], failed: dict[str, str], say: Callable[[str], None]) -> None:
    """Run ``todo`` in ``workers`` spawned processes, filling ``done``, ``ran`` and ``failed``."""
    # "spawn": a forked child would inherit OpenMP/LightGBM thread pools mid-state and can hang.
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_worker_signals, initargs=(os.getpid(),))
    try:
        futures = {pool.submit(_run_cell_worker, cell.model_dump_json(), str(out)): cell for cell in todo}
        for i, future in enumerate(as_completed(futures), 1):
            cell = futures[future]
            try:
                done[cell.run_id], caught = future.result()
                _show_warnings(cell.run_id, caught)
                ran.append(cell.run_id)
                say(f"[{i}/{len(todo)}] {cell.run_id} finished")
            except SmoothrankError as err:
                failed[cell.run_id] = str(err)
                say(f"[{i}/{len(todo)}] {cell.run_id} failed: {err}")
            except BrokenProcessPool:
                # A worker was killed (out of memory, a signal): every pending run fails with it.
                # Finished runs are on disk and a re-run resumes the others from their checkpoints.
                failed[cell.run_id] = ("a worker process died abruptly (killed by a signal or out of "
                                       "memory); run the command again to continue it")
                say(f"[{i}/{len(todo)}] {cell.run_id} failed: {failed[cell.run_id]}")
    except BaseException as err:
        # Ctrl-C: drop the queued runs instead of waiting for them (as leaving a `with` block would).
        pool.shutdown(wait=False, cancel_futures=True)
        if isinstance(err, KeyboardInterrupt):
            _interrupt_workers()
        raise
    pool.shutdown()


@dataclass
class ExperimentOutcome:
    """``results`` of every finished cell (in grid order); which ran now, were found finished, failed.

    ``failed`` maps a run id (or an ensemble id) to its error message; a failed run leaves no
    ``result.json``, so the next invocation tries it again. ``results`` also holds the seed
    ensembles (``kind`` "ensemble"), each right after its last member run; ``ensembles_built``
    were (re)built now, ``ensembles_reused`` were found up to date.
    """

    results: list[dict[str, Any]]
    ran: list[str]
    skipped: list[str]
    failed: dict[str, str] = field(default_factory=dict)
    ensembles_built: list[str] = field(default_factory=list)
    ensembles_reused: list[str] = field(default_factory=list)


# The keys the summaries and ``smoothrank compare`` read from every result.json.
_RESULT_KEYS = ("dataset", "fold", "method", "kind", "metrics")


def read_result(path: Path) -> dict[str, Any]:
    """One ``result.json``; a damaged one (not JSON, not a result object) is an error naming it."""
    try:
        result = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise SmoothrankError(f"{path}: not valid JSON ({err}); delete it to redo the run") from None
    missing = [key for key in _RESULT_KEYS if key not in result] if isinstance(result, dict) else None
    if missing is None or missing:
        what = f"no {', '.join(missing)}" if missing else f"a JSON {type(result).__name__}"
        raise SmoothrankError(f"{path}: not a run result ({what}); delete it to redo the run")
    problem = _value_problem(result)
    if problem:
        raise SmoothrankError(f"{path}: not a run result ({problem}); delete it to redo the run")
    return result


def _is_value(x: Any) -> bool:
    """A metric value as stored: a number (not a bool), or null or NaN (undefined under the
    convention); not infinite, which the runner writes as null (``strict_json``)."""
    if x is None or isinstance(x, bool) or not isinstance(x, int | float):
        return x is None
    try:
        return not math.isinf(x)
    except OverflowError:  # an integer of hundreds of digits, in a result written by hand
        return False


def _is_qid(x: Any) -> bool:
    """A query id as stored: a string (a whole number in a result written by hand)."""
    return isinstance(x, str) or (isinstance(x, int) and not isinstance(x, bool))


def _value_problem(result: dict[str, Any]) -> str | None:
    """What is wrong with a result's values (None: nothing), so that summaries, ``compare`` and the
    blends never meet a number for a name, a string for a metric or a short per-query list in the
    middle of their work."""
    for key in ("dataset", "method", "kind"):
        if not isinstance(result[key], str):
            return f"{key}: expected a string, got {json.dumps(result[key])}"
    fold = result["fold"]
    if not (fold is None or (isinstance(fold, int) and not isinstance(fold, bool))):
        return f"fold: expected a whole number or null, got {json.dumps(fold)}"
    metrics = result["metrics"]
    splits = metrics.values() if isinstance(metrics, dict) else [[]]
    if not all(v is None or (isinstance(v, dict) and all(map(_is_value, v.values()))) for v in splits):
        return "metrics: expected finite numbers (or null) per split and metric"
    per_query = result.get("per_query")
    if per_query is None:
        return None
    if not isinstance(per_query, dict) or not isinstance(per_query.get("qids", []), list):
        return "per_query: expected an object with a list of qids"
    if not all(map(_is_qid, per_query.get("qids", []))):
        return "per_query.qids: expected query ids (strings)"
    n = len(per_query.get("qids", []))
    for metric, values in per_query.items():
        if metric == "qids":
            continue
        if not isinstance(values, list) or len(values) != n or not all(_is_value(x) for x in values):
            return f"per_query.{metric}: expected {n} finite numbers (or null), one per query id"
    return None


def finished_result(cell: Cell, out_dir: Path) -> dict[str, Any] | None:
    """The stored result of ``cell``, or None if it has not finished; stale results are an error."""
    path = out_dir / "runs" / cell.run_id / RESULT_FILE
    if not path.is_file():
        return None
    result = read_result(path)
    if result.get("fingerprint") != cell.fingerprint():
        raise ConfigError(f"{path}: this run was made with other settings than the spec now gives; "
                          "use another --out folder or delete the run folder to redo it")
    return result


def check_out_dir(spec: ExperimentSpec, out_dir: str | Path) -> None:
    """Raise if ``out_dir`` holds a run of ``spec`` made with other settings, or a damaged one, or if
    a neural run still to do asks for a device this machine cannot use (``neural.training.device``:
    every run would fail): checked before anything is written there (``spec.yaml`` included)."""
    from smoothrank.experiments.spec import expand
    from smoothrank.training.blocks import resolve_device

    devices: set[str] = set()
    for cell in expand(spec):
        if finished_result(cell, Path(out_dir)) is None and cell.kind == "neural":
            _check_interrupted(cell, Path(out_dir) / "runs" / cell.run_id)
            devices.add(str(cell.settings["config"].get("training", {}).get("device", "cpu")))
    for device in sorted(devices):
        try:
            resolve_device(device)
        except ConfigError as err:
            raise ConfigError(f"neural.{err} (a run still to do would fail)") from None


def _stored_identity(run_dir: Path) -> dict[str, Any] | None:
    """The cell identity a neural run recorded when it started (None: none, or unreadable)."""
    try:
        stored = json.loads((run_dir / CELL_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return stored if isinstance(stored, dict) and isinstance(stored.get("fingerprint"), str) else None


def _check_interrupted(cell: Cell, run_dir: Path) -> None:
    """Refuse an interrupted neural run (a checkpoint, no result) that the spec now sets otherwise,
    or whose data files' contents changed: resuming would mix two settings in one result.

    The run's fingerprint, recorded in ``cell.json`` when it started, is compared, so data moved
    to another path resumes and ``num_threads`` counts. A run interrupted before runs recorded it
    (2026-11-24) is compared by the checkpoint's config, paths included."""
    if not any((run_dir / part / "checkpoint.pt").is_file() for part in ("train", "refit")):
        return
    stored = _stored_identity(run_dir)
    if stored is not None:
        if stored["fingerprint"] == cell.fingerprint():
            return
        from smoothrank.training.checkpoint import config_differences

        changes = "; ".join(config_differences(stored.get("identity"), cell.identity())) or "its fingerprint"
    else:
        from smoothrank.training.checkpoint import checkpoint_changes
        from smoothrank.training.config import SCHEDULE_OPTIONS, config_from_dict

        config = config_from_dict(cell.settings["config"], source=f"run {cell.run_id}", probe_loss=False,
                                  inherited_schedule=SCHEDULE_OPTIONS)
        changes = checkpoint_changes(config, run_dir / "train")
        if not changes:
            return
    raise ConfigError(f"{run_dir}: an interrupted run made with other settings or data than the spec now "
                      f"gives ({changes}); use another --out folder or delete the run folder to redo it")


def run_experiment(spec: ExperimentSpec, out_dir: str | Path, *, workers: int = 1,
                   log: Callable[[str], None] | None = None) -> ExperimentOutcome:
    """Run every unfinished cell of ``spec`` (``workers`` processes) and return all results.

    Summaries are not written here: see :func:`smoothrank.experiments.report.write_reports`.
    """
    from smoothrank.experiments.spec import expand

    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise SmoothrankError(f"workers: expected an integer >= 1, got {workers!r}")
    say = log or (lambda _msg: None)
    out = Path(out_dir)
    cells = expand(spec)
    done: dict[str, dict[str, Any]] = {}
    todo: list[Cell] = []
    for cell in cells:
        found = finished_result(cell, out)
        if found is not None:
            done[cell.run_id] = found
        else:
            todo.append(cell)
    skipped = list(done)
    say(f"{len(cells)} run(s): {len(skipped)} already finished, {len(todo)} to run")
    ran: list[str] = []
    failed: dict[str, str] = {}
    if workers == 1 or len(todo) <= 1:
        for i, cell in enumerate(todo, 1):
            say(f"[{i}/{len(todo)}] {cell.run_id}")
            try:
                done[cell.run_id], caught = _run_cell_noting_warnings(cell, out)
                _show_warnings(cell.run_id, caught)
                ran.append(cell.run_id)
            except SmoothrankError as err:
                # A user-level failure of one run (e.g. a diverging loss) must not lose the grid.
                failed[cell.run_id] = str(err)
                say(f"  failed: {err}")
    else:
        _run_in_pool(todo, out, workers, done, ran, failed, say)
    results = [done[c.run_id] for c in cells if c.run_id in done]
    built: list[str] = []
    reused: list[str] = []
    if spec.ensemble or spec.blends:
        results = _with_ensembles(spec, cells, results, done, out, failed, built, reused, say)
    return ExperimentOutcome(results, ran, skipped, failed, built, reused)


def _with_ensembles(spec: ExperimentSpec, cells: Sequence[Cell], results: list[dict[str, Any]],
                    done: dict[str, dict[str, Any]], out: Path, failed: dict[str, str], built: list[str],
                    reused: list[str], say: Callable[[str], None]) -> list[dict[str, Any]]:
    """``results`` with each buildable seed ensemble or blend inserted after its last member run."""
    from smoothrank.experiments.ensemble import build_ensemble, plan_ensembles

    after: dict[str, list[dict[str, Any]]] = {}
    cache: dict[str, dict[str, Any]] = {}
    for plan in plan_ensembles(spec, cells):
        missing = [c.run_id for c in plan.members if c.run_id not in done]
        if missing:
            say(f"ensemble {plan.ensemble_id}: waiting for {len(missing)} unfinished run(s)")
            continue
        try:
            result, now = build_ensemble(plan, out, done, metrics=spec.metrics, convention=spec.convention,
                                         split_cache=cache)
        except SmoothrankError as err:
            failed[plan.ensemble_id] = str(err)
            say(f"ensemble {plan.ensemble_id} failed: {err}")
            continue
        (built if now else reused).append(plan.ensemble_id)
        if now:
            say(f"ensemble {plan.ensemble_id} built")
        after.setdefault(plan.members[-1].run_id, []).append(result)
    merged: list[dict[str, Any]] = []
    for result in results:
        merged += [result, *after.get(result["run_id"], [])]
    return merged


def load_results(out_dir: str | Path, *, ensembles: bool = False) -> list[dict[str, Any]]:
    """Every ``result.json`` under ``OUT/runs`` (sorted by run id), then, with ``ensembles``,
    under ``OUT/ensembles``."""
    paths = sorted((Path(out_dir) / "runs").glob(f"*/{RESULT_FILE}"))
    if ensembles:
        paths += sorted((Path(out_dir) / "ensembles").glob(f"*/{RESULT_FILE}"))
    return [read_result(p) for p in paths]
