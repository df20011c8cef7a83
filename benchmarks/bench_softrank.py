"""Benchmark of SoftNDCG (exact, exact@10, normal, hybrid) against this project's NeuralNDCG.

Forward + backward of the loss alone, float32, ``--threads`` threads (default 2), random scores and
graded labels. Every (case, size) runs in a fresh subprocess, so that its peak resident memory
(``VmHWM``) can be compared with the footprint right after import ("delta", which includes loading
the compiled kernel on the first call). Cases are interleaved over ``--rounds`` rounds and the
tables report medians. Set ``OMP_WAIT_POLICY=PASSIVE`` (done here for the children) on a shared
machine: small operations otherwise stall up to 40x with 2 threads under load.

    .venv/bin/python benchmarks/bench_softrank.py                      # 64 x 240 and the scaling table
    .venv/bin/python benchmarks/bench_softrank.py --sizes 64x240 --rounds 5 --out bench.json

Reference figures (not run here): allRank 1.4.3 neuralNDCG 3.7 s at 64 x 240 and 33.6 s at
16 x 1000 on this kind of machine (/work/shared/PERFORMANCE-NOTES.md).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CASES = {
    "soft_ndcg exact": {"loss": "soft_ndcg", "options": {"method": "exact"}},
    "soft_ndcg exact@10": {"loss": "soft_ndcg", "options": {"method": "exact", "k": 10}},
    "soft_ndcg normal": {"loss": "soft_ndcg", "options": {"method": "normal"}},
    "soft_ndcg hybrid(10)": {"loss": "soft_ndcg", "options": {"method": "hybrid", "n_exact": 10}},
    "soft_ndcg exact+sinkhorn": {"loss": "soft_ndcg", "options": {"method": "exact", "sinkhorn": True}},
    "neural_ndcg (this project)": {"loss": "neural_ndcg", "options": {}},
}

CHILD = r"""
import json, statistics, sys, time
spec = json.loads(sys.argv[1])

def hwm_kib():
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0

import torch
torch.set_num_threads(spec["threads"])
import smoothrank.losses as losses
base = hwm_kib()
loss_fn = losses.get(spec["loss"], **spec["options"])
gen = torch.Generator().manual_seed(0)
b, n = spec["batch"], spec["n"]
scores = torch.randn(b, n, generator=gen)
labels = torch.randint(0, 5, (b, n), generator=gen).float()
mask = torch.ones(b, n, dtype=torch.bool)
# warm-up on a small input: loads the compiled kernel (cached on disk) outside the timings
warm = torch.randn(2, 8, requires_grad=True)
loss_fn(warm, torch.ones(2, 8)).backward()
times = []
for _ in range(spec["reps"]):
    x = scores.clone().requires_grad_()
    t0 = time.perf_counter()
    loss_fn(x, labels, mask=mask).backward()
    times.append(time.perf_counter() - t0)
    assert torch.isfinite(x.grad).all()
print(json.dumps({"time_s": statistics.median(times), "delta_mib": (hwm_kib() - base) / 1024}))
"""


def run_case(name: str, batch: int, n: int, *, threads: int, reps: int, timeout: float) -> dict | None:
    spec = dict(CASES[name], batch=batch, n=n, threads=threads, reps=reps)
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", OMP_NUM_THREADS=str(threads),
               NUMBA_NUM_THREADS=str(threads))
    try:
        proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(spec)], capture_output=True,
                              text=True, env=env, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return None
    if proc.returncode != 0:
        print(f"  {name} {batch}x{n} failed:\n{proc.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def parse_size(text: str) -> tuple[int, int]:
    batch, n = text.lower().split("x")
    return int(batch), int(n)


def write_json_atomic(path: Path, data: object) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        json.dump(data, fh, indent=2)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", default=["64x240", "64x30", "64x100", "16x1000"])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reps", type=int, default=3, help="timed repetitions per subprocess")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per subprocess")
    parser.add_argument("--out", type=Path, help="write the raw results as JSON")
    args = parser.parse_args(argv)

    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    results: dict[str, dict[str, list[dict]]] = {}
    for rnd in range(args.rounds):
        for size in args.sizes:
            batch, n = parse_size(size)
            for name in args.cases:
                res = run_case(name, batch, n, threads=args.threads, reps=args.reps, timeout=args.timeout)
                results.setdefault(size, {}).setdefault(name, []).append(res or {})
                shown = ("failed/timeout" if res is None
                         else f"{res['time_s']:.3f} s, delta {res['delta_mib']:.0f} MiB")
                print(f"round {rnd + 1} {size:>8} {name:<28} {shown}", flush=True)
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    print(f"\n| case | {' | '.join(args.sizes)} |\n|---|{'---|' * len(args.sizes)}")
    for name in args.cases:
        cells = []
        for size in args.sizes:
            runs = [r for r in results[size][name] if r]
            if not runs:
                cells.append("n/a")
                continue
            t = statistics.median(r["time_s"] for r in runs)
            m = statistics.median(r["delta_mib"] for r in runs)
            cells.append(f"{t * 1000:.0f} ms, Δ{m:.0f} MiB")
        print(f"| {name} | {' | '.join(cells)} |")
    if args.out:
        write_json_atomic(args.out, {"threads": args.threads, "results": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
