"""Where Python runs signal handlers during NeuralNDCG's first call (Numba compiles or loads its kernels).

Usage: NUMBA_CACHE_DIR=DIR .venv/bin/python benchmarks/interrupt_probe.py [--every-ms 3]
(an empty or new DIR: a cold compilation; run it twice with the same DIR for a load from the cache)

An experiment worker stops on SIGTERM (its parent's death) by a KeyboardInterrupt raised from the
signal handler, which Python runs in the main thread between two bytecodes of whatever code runs
then. Raised inside a ``__del__`` or a ctypes callback, the exception is printed as "Exception
ignored" and dropped. This script fires SIGALRM every ``--every-ms`` during the first forward and
backward pass of ``neural_ndcg`` on the CPU and counts the handler's runs inside a ``__del__`` and
inside llvmlite's object-cache callbacks (ctypes), and the longest stretch without a handler run
(a compiled call that holds the main thread).
"""

from __future__ import annotations

import argparse
import itertools
import os
import signal
import time
from typing import Any

_CALLBACKS = ("_raw_object_cache_notify", "_raw_object_cache_getbuffer")  # llvmlite's ctypes hooks


def where(frame: Any) -> str:
    """``__del__``, ``ctypes callback`` or ``elsewhere``: the innermost of the first two on the stack."""
    while frame is not None:
        if frame.f_code.co_name == "__del__":
            return "__del__"
        if frame.f_code.co_name in _CALLBACKS:
            return "ctypes callback"
        frame = frame.f_back
    return "elsewhere"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--every-ms", type=float, default=3.0)
    args = parser.parse_args()
    import torch

    from smoothrank.losses import neural_ndcg

    counts = {"__del__": 0, "ctypes callback": 0, "elsewhere": 0}
    stamps: list[float] = []

    def handler(_signum: int, frame: Any) -> None:
        stamps.append(time.perf_counter())
        counts[where(frame)] += 1

    scores = torch.randn(4, 6, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, 3, (4, 6)).to(torch.float64)
    signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, args.every_ms / 1000, args.every_ms / 1000)
    start = time.perf_counter()
    neural_ndcg(scores, labels).sum().backward()
    end = time.perf_counter()
    signal.setitimer(signal.ITIMER_REAL, 0)
    edges = [start, *stamps, end]
    gap = max(b - a for a, b in itertools.pairwise(edges))
    total = sum(counts.values())
    cache = os.environ.get("NUMBA_CACHE_DIR", "(default)")
    print(f"NUMBA_CACHE_DIR={cache}: first call {end - start:.2f} s, "
          f"{total} handler runs, {counts['__del__']} inside a __del__, {counts['ctypes callback']} inside a "
          f"ctypes callback ({(counts['__del__'] + counts['ctypes callback']) / max(total, 1):.2%} dropped "
          f"if raised there); longest stretch without one {gap:.2f} s")


if __name__ == "__main__":
    main()
