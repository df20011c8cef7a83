"""Benchmark: one loss's forward + backward in two source trees, alternating fresh processes.

Usage::

    git worktree add /tmp/old_ed1816f ed1816f
    .venv/bin/python benchmarks/bench_versions.py --old /tmp/old_ed1816f --loss rank_net --rounds 5

Each round runs the old tree, then this checkout, each in a fresh process with ``PYTHONPATH`` set to
its tree, one thread, float32, 64 x 240 by default (``--size``). A process times ``--calls`` calls
after three warm-up calls, by CPU time (``time.process_time``, so that other processes on a shared
machine count less than in wall time), and reports the minimum and the median. The table gives
every round, so the round-to-round spread is beside the difference.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from _args import positive_int
from _args import sizes as sizes_arg

REPO = Path(__file__).resolve().parent.parent


def worker(loss: str, batch: int, n: int, calls: int) -> None:
    import time

    import torch

    from smoothrank import losses

    torch.set_num_threads(1)
    name, _, k = loss.partition("@")  # NAME@K: the loss with k=K
    fn = losses.get(name, **({"k": int(k)} if k else {}))
    gen = torch.Generator().manual_seed(0)
    scores = torch.randn(batch, n, generator=gen)
    labels = torch.randint(0, 5, (batch, n), generator=gen).float()
    labels[:, 0] = 4.0
    times = []
    for i in range(calls + 3):
        s = scores.clone().requires_grad_()
        t0 = time.process_time()
        fn(s, labels).backward()
        if i >= 3:
            times.append(time.process_time() - t0)
    print(json.dumps({"min": min(times), "median": statistics.median(times)}))


def run(tree: Path, loss: str, batch: int, n: int, calls: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, __file__, "--worker", loss, str(batch), str(n), str(calls)],
                         env=env, capture_output=True, text=True, check=True, cwd=REPO / "benchmarks")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--worker", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--old", type=Path, help="the other source tree (a folder holding smoothrank/)")
    parser.add_argument("--loss", default="rank_net", help="a registered loss; NAME@K for the loss with k=K")
    parser.add_argument("--size", type=sizes_arg, default="64x240", help="batch x list size")
    parser.add_argument("--rounds", type=positive_int, default=5)
    parser.add_argument("--calls", type=positive_int, default=20, help="timed calls per process")
    args = parser.parse_args(argv)
    if args.worker:
        loss, b, n, calls = args.worker
        worker(loss, int(b), int(n), int(calls))
        return 0
    if args.old is None or not (args.old / "smoothrank").is_dir():
        parser.error(f"--old: {args.old} holds no smoothrank/ folder")
    (b, n), = args.size
    uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"# {args.loss}, {b} x {n}, float32, 1 thread, CPU ms per forward + backward; "
          f"load before: {uptime}")
    print("| round | old min | old median | this min | this median |")
    print("|---|---|---|---|---|")
    mins: dict[str, list[float]] = {"old": [], "this": []}
    for r in range(1, args.rounds + 1):
        old = run(args.old, args.loss, b, n, args.calls)
        this = run(REPO, args.loss, b, n, args.calls)
        mins["old"].append(old["min"])
        mins["this"].append(this["min"])
        print(f"| {r} | {old['min'] * 1e3:.1f} | {old['median'] * 1e3:.1f} | {this['min'] * 1e3:.1f} | "
              f"{this['median'] * 1e3:.1f} |", flush=True)
    ratio = statistics.median(mins["this"]) / statistics.median(mins["old"])
    print(f"# median over rounds of the minimum: this / old = {ratio:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
