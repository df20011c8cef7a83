"""``smoothrank experiment SPEC``: run an experiment grid and write its summaries.

Finished runs (``OUT/runs/<run id>/result.json``) are skipped, so an interrupted experiment is
continued by running the same command again.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

from smoothrank._atomic import folder_lock, write_bytes_atomic
from smoothrank.cli import CLIError


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "experiment", help="run an experiment grid (folds x losses x models x GBDT baselines)",
        description="Run every unfinished run of an experiment spec (YAML), then write summary.md, "
                    "summary.csv and summary.json. See docs/EXPERIMENTS.md.")
    parser.add_argument("spec", help="experiment spec (YAML), e.g. experiments/mq2008.yaml")
    parser.add_argument("--out", default=None,
                        help="output folder (default: runs/experiments/<spec name>)")
    parser.add_argument("--workers", default="1",
                        help="runs in parallel, one process each: an integer, or 'auto' for the usable "
                             "CPUs divided by the spec's num_threads (default 1)")
    parser.add_argument("--correction", choices=("none", "holm", "bh"), default=None,
                        help="adjust the baseline t-tests' p-values over the methods, per metric, in the "
                             "summaries (default: the spec's correction, itself none by default)")
    parser.add_argument("--reuse", action="append", default=[], metavar="DIR",
                        help="another experiment's output folder whose finished runs of the same run id and "
                             "fingerprint (same settings and data) are copied in instead of being run again; "
                             "for a refit spec, a run without refit lends its selection training. "
                             "Repeatable: a finished run comes before a selection training, then the "
                             "first folder given")
    parser.add_argument("--dry-run", action="store_true", help="list the runs and exit")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    parser.set_defaults(func=run)


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))  # respects taskset / container CPU sets
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _workers(text: str, num_threads: int) -> int:
    """``--workers``: an integer >= 1, or ``auto`` = usable CPUs // threads per run (at least 1)."""
    if text == "auto":
        return max(1, _usable_cpus() // num_threads)
    try:
        workers = int(text)
    except ValueError:
        workers = 0
    if workers < 1:
        raise CLIError(f"--workers: expected an integer >= 1 or 'auto', got {text!r}")
    return workers


def run(args: Any) -> int:
    from smoothrank.experiments import expand, load_spec
    from smoothrank.experiments.reuse import check_sources, find_reusable
    from smoothrank.experiments.runner import check_out_dir, finished_result

    if args.out is not None and not args.out.strip():
        raise CLIError("--out: expected a folder path, got an empty one")
    spec = load_spec(args.spec)
    for folder in args.reuse:
        if not folder.strip():
            raise CLIError("--reuse: expected a folder path, got an empty one")
    check_sources(args.reuse)  # before anything is written to --out
    args.workers = _workers(args.workers, spec.num_threads)
    out = Path(args.out) if args.out is not None else Path("runs") / "experiments" / spec.name
    from smoothrank._atomic import blocking_file

    blocker = blocking_file(out)  # else mkdir's bare "File exists", naming no option
    if blocker is not None:
        where = "--out" if args.out is not None else f"the default output folder {out} (give --out)"
        raise CLIError(f"{where}: {blocker} is not a directory")
    if args.dry_run:
        from smoothrank.experiments.ensemble import ensemble_state, plan_ensembles

        check_out_dir(spec, out)  # what the run would refuse, the dry run refuses
        cells = expand(spec)
        finished = {cell.run_id for cell in cells if finished_result(cell, out) is not None}
        reusable = {r.cell.run_id: r for r in find_reusable(cells, out, args.reuse)}
        for cell in cells:
            state = "finished" if cell.run_id in finished else "to run"
            if state == "to run" and (out / "runs" / cell.run_id / "train" / "checkpoint.pt").is_file():
                state = "to run (resumes from its checkpoint)"
            elif cell.run_id in reusable:
                reuse = reusable[cell.run_id]
                state = f"finished ({reuse.describe()})" if reuse.part == "run" else \
                    f"to run (the refit only; {reuse.describe()})"
            print(f"{cell.run_id}\t{state}")
        finished |= {run_id for run_id, r in reusable.items() if r.part == "run"}
        for plan in plan_ensembles(spec, cells):
            state = ensemble_state(plan, out, finished, convention=spec.convention)
            print(f"{plan.ensemble_id}\tensemble, {state}")
        return 0
    check_out_dir(spec, out)  # a folder of other settings is refused before spec.yaml is replaced
    out.mkdir(parents=True, exist_ok=True)
    with folder_lock(out, "an experiment"):  # one experiment command per folder at a time
        return _run_locked(args, spec, out)


def _run_locked(args: Any, spec: Any, out: Path) -> int:
    from smoothrank.experiments import expand, run_experiment, write_reports
    from smoothrank.experiments.ensemble import plan_ensembles
    from smoothrank.experiments.report import SUMMARY_FILES
    from smoothrank.experiments.reuse import apply_reuse, find_reusable
    from smoothrank.experiments.runner import PLAN_FILE, check_out_dir

    def log(message: str) -> None:
        if not args.quiet:
            print(message, file=sys.stderr, flush=True)

    check_out_dir(spec, out)  # again under the lock: another command may have run in between
    # A summary of an earlier command (perhaps of another spec) must not outlive this one if it is
    # interrupted or killed: the summaries are written again at the end.
    for name in SUMMARY_FILES:
        (out / name).unlink(missing_ok=True)
    write_bytes_atomic(out / "spec.yaml", Path(args.spec).read_bytes())
    cells = expand(spec)  # what `compare` reads of this folder, as the summary does
    if args.reuse:
        apply_reuse(find_reusable(cells, out, args.reuse), out, log=log)
    plan = {"runs": [c.run_id for c in cells],
            "ensembles": [p.ensemble_id for p in plan_ensembles(spec, cells)]}
    write_bytes_atomic(out / PLAN_FILE, (json.dumps(plan, indent=1) + "\n").encode())

    outcome = run_experiment(spec, out, workers=args.workers, log=log)
    command = "smoothrank experiment " + " ".join(shlex.quote(a) for a in sys.argv[2:]) \
        if len(sys.argv) > 2 and sys.argv[1] == "experiment" else None
    found = {r.get("run_id") for r in outcome.results}
    missing = {run_id: outcome.failed.get(run_id, "not run")
               for run_id in [*plan["runs"], *plan["ensembles"]] if run_id not in found}
    missing.update({k: v for k, v in outcome.failed.items() if k not in missing})
    write_reports(outcome.results, out, metrics=spec.metrics, title=f"Experiment {spec.name}",
                  convention=spec.convention, baseline=spec.baseline, alpha=spec.alpha, command=command,
                  select_by=spec.select_by,
                  correction=args.correction if args.correction is not None else spec.correction,
                  missing=missing)
    ensembles = (f"{len(outcome.ensembles_built)} ensemble(s) built, {len(outcome.ensembles_reused)} reused; "
                 if spec.ensemble or spec.blends else "")
    print(f"{len(outcome.ran)} run(s) done, {len(outcome.skipped)} skipped (finished before); {ensembles}"
          f"summary: {out / 'summary.md'}")
    if missing:
        print(f"{len(missing)} run(s) failed or were not run (run the command again to retry them):",
              file=sys.stderr)
        for run_id, message in missing.items():
            print(f"  {run_id}: {message}", file=sys.stderr)
        return 1
    return 0
