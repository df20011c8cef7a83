"""Benchmark of SoftNDCG (exact, exact@10, normal, hybrid) against NeuralNDCG (this project's and
allRank 1.4.3's, the issue's reference), with the issue's targets checked on the same run.

Forward + backward of the loss alone, float32, ``--threads`` threads (default 2), random scores and
graded labels. Every (case, size) runs in a fresh subprocess, so that its peak resident memory
(``VmHWM``) can be compared with the footprint right after import ("delta", which includes loading
the compiled kernel on the first call). Cases are interleaved over ``--rounds`` rounds and the
tables report medians. Set ``OMP_WAIT_POLICY=PASSIVE`` (done here for the children) on a shared
machine: small operations otherwise stall up to 40x with 2 threads under load.

    .venv/bin/python benchmarks/bench_softrank.py                      # 64 x 240 and the scaling table
    .venv/bin/python benchmarks/bench_softrank.py --sizes 64x240 --rounds 5 --out bench.json

allRank 1.4.3 is installed into /tmp with ``pip --no-deps --target`` and its unused imports stubbed
(``benchmarks/bench_losses.py``); it runs at n < 1000 unless ``--peer-large`` (7 GiB, ~35 s a call).
Every case makes one untimed call at the full size first (as ``bench_losses.py``), so that no
timing, allRank's mean of ``--peer-reps`` included, holds a cold first call. A case skipped at a
size shows "skipped" in the table.
At 64 x 240 the script prints each target's same-round ratio and PASS/FAIL.
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

from _args import positive_int, size_text
from _args import size as size_of

REPO = Path(__file__).resolve().parent.parent

CASES = {
    "soft_ndcg exact": {"loss": "soft_ndcg", "options": {"method": "exact"}},
    "soft_ndcg exact@10": {"loss": "soft_ndcg", "options": {"method": "exact", "k": 10}},
    "soft_ndcg normal": {"loss": "soft_ndcg", "options": {"method": "normal"}},
    "soft_ndcg hybrid(10)": {"loss": "soft_ndcg", "options": {"method": "hybrid", "n_exact": 10}},
    "soft_ndcg exact+sinkhorn": {"loss": "soft_ndcg", "options": {"method": "exact", "sinkhorn": True}},
    "neural_ndcg (this project)": {"loss": "neural_ndcg", "options": {}},
    "allRank 1.4.3 neuralNDCG": {"loss": "allRank:neural_ndcg", "options": {}},
}
PEER_CASE = "allRank 1.4.3 neuralNDCG"

# The targets at 64 x 240: (case, reference case, max time ratio, max peak delta MiB).
TARGETS = [
    ("soft_ndcg exact", PEER_CASE, 0.5, 250.0),
    ("soft_ndcg exact@10", PEER_CASE, 0.1, None),
    ("soft_ndcg normal", "neural_ndcg (this project)", 1.0, None),
]
TARGET_SIZE = "64x240"

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
if spec["loss"].startswith("allRank:"):
    # allRank 1.4.3, installed and import-stubbed as in benchmarks/bench_losses.py
    sys.path.insert(0, spec["bench_dir"])
    from bench_losses import _loss_callable
    loss_fn = _loss_callable("allRank", spec["loss"].split(":", 1)[1])
else:
    loss_fn = losses.get(spec["loss"], **spec["options"])
base = hwm_kib()
gen = torch.Generator().manual_seed(0)
b, n = spec["batch"], spec["n"]
scores = torch.randn(b, n, generator=gen)
labels = torch.randint(0, 5, (b, n), generator=gen).float()
mask = torch.ones(b, n, dtype=torch.bool)
# warm-up: a small input first loads the compiled kernel (cached on disk), so that its transient
# memory does not add to a full-size call's peak; then one untimed call at the full size, so that
# no timing (allRank's mean of --peer-reps included) holds a cold first call
loss_fn(torch.randn(2, 8, requires_grad=True), torch.ones(2, 8)).backward()
loss_fn(scores.clone().requires_grad_(), labels, mask=mask).backward()
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
    spec = dict(CASES[name], batch=batch, n=n, threads=threads, reps=reps,
                bench_dir=str(Path(__file__).resolve().parent))
    # the checkout first on the path: run from elsewhere, the children would import an installed smoothrank
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", OMP_NUM_THREADS=str(threads),
               NUMBA_NUM_THREADS=str(threads),
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    try:
        proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(spec)], capture_output=True,
                              text=True, env=env, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return None
    if proc.returncode != 0:
        print(f"  {name} {batch}x{n} failed:\n{proc.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def report_targets(at_size: dict[str, list[dict]]) -> None:
    """Print each target's ratio (median over rounds of the same-round ratio) and PASS/FAIL."""
    print(f"\ntargets at {TARGET_SIZE} (ratio = median over rounds of time / reference time in that round)")
    for case, ref, max_ratio, max_mib in TARGETS:
        pairs = [(a, b) for a, b in zip(at_size.get(case, []), at_size.get(ref, []), strict=False) if a and b]
        if not pairs:
            print(f"  {case} vs {ref}: not measured")
            continue
        ratio = statistics.median(a["time_s"] / b["time_s"] for a, b in pairs)
        ok = ratio <= max_ratio
        line = f"  {case}: {ratio:.3f} x {ref} (target <= {max_ratio})"
        if max_mib is not None:
            mib = statistics.median(a["delta_mib"] for a, _ in pairs)
            ok = ok and mib < max_mib
            line += f", peak delta {mib:.0f} MiB (target < {max_mib:.0f})"
        print(f"{line}: {'PASS' if ok else 'FAIL'}")


def table_cell(runs: list[dict] | None) -> str:
    """Median time and peak delta over the rounds; "skipped" if never run, "n/a" if every run failed."""
    if runs is None:
        return "skipped"
    runs = [r for r in runs if r]
    if not runs:
        return "n/a"
    t = statistics.median(r["time_s"] for r in runs)
    m = statistics.median(r["delta_mib"] for r in runs)
    return f"{t * 1000:.0f} ms, Δ{m:.0f} MiB"


def parse_size(text: str) -> tuple[int, int]:
    return size_of(text)


def write_json_atomic(path: Path, data: object) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        json.dump(data, fh, indent=2)
    os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, allow_abbrev=False,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", type=size_text,
                        default=["64x240", "64x30", "64x100", "16x1000"])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--rounds", type=positive_int, default=3)
    parser.add_argument("--reps", type=positive_int, default=3, help="timed repetitions per subprocess")
    parser.add_argument("--threads", type=positive_int, default=2)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per subprocess")
    parser.add_argument("--out", type=Path, help="write the raw results as JSON")
    parser.add_argument("--no-peer", action="store_true", help="skip allRank")
    parser.add_argument("--peer-large", action="store_true",
                        help="also run allRank at n >= 1000 (about 7 GiB and 35 s per repetition)")
    parser.add_argument("--peer-reps", type=positive_int, default=2, help="timed repetitions of allRank")
    args = parser.parse_args(argv)
    if args.no_peer and PEER_CASE in args.cases:
        args.cases.remove(PEER_CASE)
    if PEER_CASE in args.cases:
        from bench_losses import install_peer

        note = install_peer()
        if note:
            print(f"note: {note}")
            args.cases.remove(PEER_CASE)

    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    results: dict[str, dict[str, list[dict]]] = {}
    for rnd in range(args.rounds):
        for size in args.sizes:
            batch, n = parse_size(size)
            for name in args.cases:
                if name == PEER_CASE and n >= 1000 and not args.peer_large:
                    continue
                reps = args.peer_reps if name == PEER_CASE else args.reps
                res = run_case(name, batch, n, threads=args.threads, reps=reps, timeout=args.timeout)
                results.setdefault(size, {}).setdefault(name, []).append(res or {})
                shown = ("failed/timeout" if res is None
                         else f"{res['time_s']:.3f} s, delta {res['delta_mib']:.0f} MiB")
                print(f"round {rnd + 1} {size:>8} {name:<28} {shown}", flush=True)
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    print(f"\n| case | {' | '.join(args.sizes)} |\n|---|{'---|' * len(args.sizes)}")
    for name in args.cases:
        # a size where every case was skipped has no entry at all
        cells = [table_cell(results.get(size, {}).get(name)) for size in args.sizes]
        print(f"| {name} | {' | '.join(cells)} |")
    if PEER_CASE in args.cases and not args.peer_large and any(parse_size(s)[1] >= 1000 for s in args.sizes):
        print(f"\nskipped: {PEER_CASE} at n >= 1000 (about 7 GiB; --peer-large runs it)")
    report_targets(results.get(TARGET_SIZE, {}))
    if args.out:
        write_json_atomic(args.out, {"threads": args.threads, "results": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
