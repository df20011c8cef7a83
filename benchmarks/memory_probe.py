"""Where a smoothrank command's memory goes: its anonymous memory and the call stack, sampled together.

Usage: .venv/bin/python benchmarks/memory_probe.py [--every-ms 20] [--jumps-mib 50] COMMAND [ARGS ...]
e.g.   .venv/bin/python benchmarks/memory_probe.py train config.yaml --quiet

Runs ``smoothrank COMMAND ARGS`` in this process while a thread reads ``RssAnon`` of
``/proc/self/status`` and the main thread's stack every ``--every-ms``; prints the peak and the stack
it was reached in, then every sample whose memory rose by ``--jumps-mib`` or more since the one before
(with its stack). This is how the 3883 MiB epoch at 3.7M documents was traced to a whole-file read
(docs/BENCHMARKS.md, "Data at scale"). The sampler needs the interpreter lock, so a long call that
holds it shows up as one sample at its end.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import threading
import time
import traceback
from pathlib import Path


def rss_anon_mib() -> float:
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("--every-ms", type=float, default=20.0)
    parser.add_argument("--jumps-mib", type=float, default=50.0)
    parser.add_argument("command", nargs=argparse.REMAINDER, help="a smoothrank command and its arguments")
    args = parser.parse_args()
    if args.every_ms <= 0 or args.jumps_mib <= 0 or not args.command:
        parser.error("--every-ms and --jumps-mib: expected positive numbers; COMMAND: expected a command")
    samples: list[tuple[float, float, list[str]]] = []
    main_id, done = threading.main_thread().ident, threading.Event()

    def sample() -> None:
        while not done.is_set():
            frame = sys._current_frames().get(main_id or 0)
            stack = [f"{Path(s.filename).name}:{s.lineno}:{s.name}"
                     for s in (traceback.extract_stack(frame)[-6:] if frame else [])]
            samples.append((time.perf_counter(), rss_anon_mib(), stack))
            time.sleep(args.every_ms / 1000)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    from smoothrank.cli import main as smoothrank_main

    try:
        status = smoothrank_main(args.command)
    finally:
        done.set()
        thread.join()
    start = samples[0][0]
    peak = max(samples, key=lambda s: s[1])
    print(f"exit status {status}; peak RssAnon {peak[1]:.0f} MiB at {peak[0] - start:.1f} s in "
          + " < ".join(reversed(peak[2])))
    for (_, before, _), (t, now, stack) in itertools.pairwise(samples):
        if now - before >= args.jumps_mib:
            print(f"{t - start:8.1f} s  +{now - before:.0f} -> {now:.0f} MiB  " + " < ".join(reversed(stack)))


if __name__ == "__main__":
    main()
