"""Benchmark: forward+backward time and peak-memory increase of every loss.

Usage::

    .venv/bin/python benchmarks/bench_losses.py                 # 3 interleaved rounds, CPU
    .venv/bin/python benchmarks/bench_losses.py --rounds 1 --no-peer
    .venv/bin/python benchmarks/bench_losses.py --device cuda   # the same table on a GPU
    .venv/bin/python benchmarks/bench_losses.py --losses neural_ndcg,soft_ndcg,soft_ndcg@10 \
        --sizes 64x240 --peers neural_ndcg --no-naive --rounds 5   # the issue's ratios, round by round

Every case runs in a fresh subprocess (float32, 2 threads, ``OMP_WAIT_POLICY=PASSIVE``): the time is
the median of the timed repetitions after one warm-up, and "peak delta" is the increase of the
process's peak resident memory (``ru_maxrss``) over its footprint after import (Numba's included)
and input creation (on CUDA: ``torch.cuda.max_memory_allocated`` over the inputs). Cases run
interleaved over several rounds and the table reports medians over rounds, so a load spike on this
shared machine hits every implementation alike; the load average (``uptime``) is printed.

Reference points: a straightforward NeuralNDCG with autograd through 30 dense Sinkhorn iterations
("naive", from tests/reference_neuralndcg.py), whose value and gradient are compared with
smoothrank's at equal iteration counts (30, tol=0), and allRank 1.4.3 (skipped with ``--no-peer``),
installed with ``pip --no-deps --target`` into /tmp on top of the torch already here; its unused
imports (torchvision, gcsfs, ...) are stubbed. If it cannot be installed the peer rows are skipped
with a note. Both run only at n < 1000 unless ``--peer-large``. Nothing in the test-suite depends
on it. A second table gives each of smoothrank's losses as a ratio to allRank's ``neuralNDCG`` (its
transposed form for ``neural_ndcg_transposed``) measured in the same round, round by round.
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

from _args import positive_int, set_threads
from _args import sizes as sizes_arg

REPO = Path(__file__).resolve().parent.parent
PEER_DIR = Path("/tmp/smoothrank_bench_allrank")
SIZES = [(64, 30), (64, 240), (16, 1000)]
OURS = ["neural_ndcg", "neural_ndcg_transposed", "approx_ndcg", "rank_net", "lambda_rank", "list_net",
        "list_mle", "rmse", "soft_ndcg"]
PEER = {"neural_ndcg": "neuralNDCG", "neural_ndcg_transposed": "neuralNDCG_transposed",
        "approx_ndcg": "approxNDCGLoss", "lambda_rank": "lambdaLoss", "rank_net": "rankNet",
        "list_net": "listNet", "list_mle": "listMLE"}


# ----------------------------------------------------------------------------- worker (subprocess)
class _Permissive:
    """Stand-in for anything from a stubbed module: a no-op decorator, callable and class."""

    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        # Used as a bare decorator (@attr.s): hand the decorated object back unchanged.
        if len(args) == 1 and not kwargs and (callable(args[0]) or isinstance(args[0], type)):
            return args[0]
        return _Permissive()

    def __getattr__(self, name):
        return _Permissive()

    def __mro_entries__(self, bases):
        return (object,)


def _stub_missing_imports(import_name: str) -> None:
    """Import ``import_name``, stubbing modules that are missing here but unused by the losses."""
    import importlib
    import types

    for _ in range(30):
        try:
            importlib.import_module(import_name)
            return
        except ModuleNotFoundError as err:
            if err.name is None or err.name.startswith("allrank"):
                raise
            parts = err.name.split(".")
            for i in range(1, len(parts) + 1):
                name = ".".join(parts[:i])
                if name not in sys.modules:
                    mod = types.ModuleType(name)
                    mod.__path__ = []  # type: ignore[attr-defined]
                    mod.__getattr__ = lambda attr: _Permissive()  # type: ignore[method-assign]
                    sys.modules[name] = mod
    raise RuntimeError("could not import allRank")


def _loss_callable(impl: str, name: str):
    if impl == "ours":
        from smoothrank import losses

        base, _, cutoff = name.partition("@")  # "soft_ndcg@10": the loss with k=10
        return losses.get(base, k=int(cutoff)) if cutoff else losses.get(name)
    if impl == "naive":
        sys.path.insert(0, str(REPO / "tests"))
        from reference_neuralndcg import naive_neural_ndcg

        return lambda s, y, mask=None: naive_neural_ndcg(s, y, n_iter=30, transposed=(name != "neural_ndcg"))
    sys.path.insert(0, str(PEER_DIR))
    _stub_missing_imports("allrank.models.losses")
    import allrank.models.losses as peer

    fn = getattr(peer, PEER[name])
    if name == "lambda_rank":
        return lambda s, y, mask=None: fn(s, y, weighing_scheme="lambdaRank_scheme")
    return lambda s, y, mask=None: fn(s, y)


def worker(impl: str, name: str, batch: int, n: int, device: str, repeats: int, grad_out: str) -> None:
    import resource
    import time

    import torch

    torch.set_num_threads(2)
    dev = torch.device(device)
    fn = _loss_callable(impl, name)
    if impl == "ours":
        # Import Numba before the baseline, as importing smoothrank did before 2026-11-24 (it is now
        # loaded on first use): the peak deltas stay comparable, the kernels' load still counted.
        from smoothrank.softrank.rank_binomial import HAVE_NUMBA  # noqa: F401

        set_threads(2)  # soft_ndcg's kernels; the peers never load Numba, so their baseline is unchanged
    gen = torch.Generator().manual_seed(batch * 7919 + n)
    scores0 = torch.randn(batch, n, generator=gen).to(dev)
    labels = torch.randint(0, 5, (batch, n), generator=gen).float().to(dev)
    labels[:, 0] = 4.0  # no empty query: every implementation treats those differently

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    else:
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    times, value, grad = [], None, None
    budget = time.perf_counter() + 20.0
    for i in range(repeats + 1):
        s = scores0.clone().requires_grad_()
        sync()
        t0 = time.perf_counter()
        loss = fn(s, labels)
        loss.backward()
        sync()
        elapsed = time.perf_counter() - t0
        if i == 0:
            value, grad = float(loss), s.grad.detach().cpu()
        else:
            times.append(elapsed)
        if i >= 1 and time.perf_counter() > budget:
            break
    if dev.type == "cuda":
        peak = (torch.cuda.max_memory_allocated() - base) / 2**20
    else:
        peak = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024  # KiB on Linux
    extra = {}
    if impl == "naive":
        # Equal iteration counts: smoothrank with exactly 30 iterations (tol=0) against the naive one.
        from smoothrank import losses

        s = scores0.clone().requires_grad_()
        ours = losses.get(name, max_iter=30, tol=0.0)(s, labels)
        ours.backward()
        extra["rel_value"] = abs(float(ours) - value) / abs(value)
        extra["rel_grad"] = float((s.grad.cpu() - grad).norm() / grad.norm())
    torch.save(grad, grad_out)
    print(json.dumps({"time": statistics.median(times), "peak_mib": peak, "value": value, **extra}))


# ----------------------------------------------------------------------------- driver
def install_peer() -> str | None:
    """Install allRank 1.4.3 under /tmp (no dependencies); return a note if that is impossible."""
    if (PEER_DIR / "allrank").is_dir():
        return None
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(PEER_DIR),
           "allRank==1.4.3"]
    try:
        subprocess.run(cmd, check=True, capture_output=True, timeout=300)
    except (subprocess.SubprocessError, OSError) as err:
        return f"allRank 1.4.3 could not be installed ({type(err).__name__}); peer rows skipped"
    return None


def run_case(impl: str, name: str, b: int, n: int, device: str, repeats: int) -> dict | None:
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE", OMP_NUM_THREADS="2",
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, __file__, "--worker", impl, name, str(b), str(n), device, str(repeats),
               str(Path(tmp) / "grad.pt")]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return {"error": last[:100]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--worker", nargs=7, help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=positive_int, default=3)
    parser.add_argument("--repeats", type=positive_int, default=5,
                        help="timed repetitions per case (after a warm-up)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--no-peer", action="store_true", help="skip allRank")
    parser.add_argument("--peer-large", action="store_true",
                        help="also run allRank and the naive reference at 16 x 1000 (~7 GiB, ~40 s each)")
    parser.add_argument("--losses", default=",".join(OURS),
                        help="comma-separated smoothrank losses; NAME@K for the loss with k=K (soft_ndcg@10)")
    parser.add_argument("--sizes", type=sizes_arg, default=",".join(f"{b}x{n}" for b, n in SIZES),
                        help="comma-separated batch x list sizes, e.g. 64x240,16x1000")
    parser.add_argument("--peers", default=",".join(PEER),
                        help=f"comma-separated allRank losses to run (of {', '.join(PEER)})")
    parser.add_argument("--no-naive", action="store_true", help="skip the naive NeuralNDCG reference")
    args = parser.parse_args(argv)
    unknown = set(args.peers.split(",")) - set(PEER)
    if unknown:
        parser.error(f"--peers: unknown {', '.join(sorted(unknown))} (choose from {', '.join(PEER)})")
    if args.worker:
        impl, name, b, n, device, repeats, grad_out = args.worker
        worker(impl, name, int(b), int(n), device, int(repeats), grad_out)
        return 0

    import torch

    uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"# smoothrank loss benchmark: torch {torch.__version__}, device {args.device}, float32, "
          f"2 threads, OMP_WAIT_POLICY=PASSIVE, {args.rounds} round(s), medians")
    print(f"# load before: {uptime}")
    peer_note = None if args.no_peer else install_peer()
    if peer_note:
        print(f"# note: {peer_note}")
    cases = []
    for b, n in args.sizes:
        large = n >= 1000
        for name in args.losses.split(","):
            cases.append(("ours", name, b, n))
        if not large or args.peer_large:
            if not args.no_naive:
                cases += [("naive", "neural_ndcg", b, n), ("naive", "neural_ndcg_transposed", b, n)]
            if not args.no_peer and peer_note is None:
                cases += [("allRank", name, b, n) for name in args.peers.split(",")]
    results: dict[tuple, list[dict]] = {c: [] for c in cases}
    for _ in range(args.rounds):
        for case in cases:
            impl, name, b, n = case
            slow = impl != "ours" and name.startswith("neural")
            result = run_case(impl, name, b, n, args.device, 1 if slow else args.repeats)
            results[case].append(result)
            # progress, so that a run cut short still leaves its measurements behind
            print(f"# {impl} {name} {b} x {n}: {json.dumps(result)}", file=sys.stderr, flush=True)
    print(f"# load after: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    print()
    print("| loss | implementation | batch x n | time (ms) | peak delta (MiB) | loss value | check |")
    print("|---|---|---|---|---|---|---|")
    for case in cases:
        impl, name, b, n = case
        runs = [r for r in results[case] if r and "error" not in r]
        if not runs:
            err = next((r["error"] for r in results[case] if r and "error" in r), "failed")
            print(f"| {name} | {impl} | {b} x {n} | - | - | - | {err} |")
            continue
        t = statistics.median(r["time"] for r in runs) * 1e3
        mem = statistics.median(r["peak_mib"] for r in runs)
        check = ""
        if impl == "naive":
            check = (f"vs smoothrank@30 it: value rel {max(r['rel_value'] for r in runs):.1e}, "
                     f"grad rel {max(r['rel_grad'] for r in runs):.1e}")
        print(f"| {name} | {impl} | {b} x {n} | {t:.1f} | {mem:.0f} | {runs[0]['value']:.6f} | {check} |")
    _print_ratios(cases, results, args.rounds)
    return 0


def _print_ratios(cases: list[tuple], results: dict[tuple, list[dict]], rounds: int) -> None:
    """Each of our losses over allRank's same loss in the same round (over its ``neuralNDCG`` for a
    loss allRank lacks, SoftNDCG; also there for the transposed form): every round's ratio and
    their median."""
    rows = []
    for impl, name, b, n in cases:
        if impl != "ours":
            continue
        own = [name] if name in PEER else []  # allRank's same loss
        # and allRank's neuralNDCG for the losses it lacks (SoftNDCG) and the transposed form
        yardstick = ["neural_ndcg"] if name not in PEER or name == "neural_ndcg_transposed" else []
        for peer in own + yardstick:
            peer_runs = results.get(("allRank", peer, b, n))
            if peer_runs:
                rows += _ratio_row(name, b, n, peer, results[(impl, name, b, n)], peer_runs)
    if rows:
        print()
        print(f"| loss | batch x n | to | ratio in each of {rounds} round(s) | median |")
        print("|---|---|---|---|---|")
        print("\n".join(rows))


def _ratio_row(name: str, b: int, n: int, peer: str, ours_runs: list[dict], peer_runs: list[dict]
               ) -> list[str]:
    """The table row of one loss against one of allRank's, or none without a pair of timed runs."""
    ratios = [ours["time"] / theirs["time"] for ours, theirs in zip(ours_runs, peer_runs, strict=True)
              if ours and theirs and "error" not in ours and "error" not in theirs]
    if not ratios:
        return []
    return [f"| {name} | {b} x {n} | allRank {PEER[peer]} | {', '.join(f'{r:.3f}' for r in ratios)} | "
            f"{statistics.median(ratios):.3f} |"]


if __name__ == "__main__":
    sys.exit(main())
