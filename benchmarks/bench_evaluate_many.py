"""`smoothrank evaluate` of many prediction files: one call for all of them against one call each.

Usage: .venv/bin/python benchmarks/bench_evaluate_many.py [--files 10] [--data PATH] [--rounds 1]

Writes ``--files`` random prediction files for ``--data`` (default: MQ2008 Fold1 test of the shared
data folder, else the bundled fold written out), then times, in fresh processes, one
``smoothrank evaluate --predictions F1 ... Fn`` against n calls ``smoothrank evaluate --predictions Fi``
(each a new interpreter that imports torch). Prints both wall times and their ratio; ``--rounds``
repeats both, interleaved, for the noise.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def _data(path: str | None, work: Path) -> Path:
    if path:
        return Path(path)
    root = Path(os.environ.get("SMOOTHRANK_SHARED", "/work/shared"))
    shared = root / "data" / "MQ2008" / "Fold1" / "test.txt"
    if shared.is_file():
        return shared
    from smoothrank.datasets import mq2008_text

    out = work / "test.txt"
    out.write_bytes(mq2008_text(1, "test"))
    return out


def _timed(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10)
    parser.add_argument("--data", default=None)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        data = _data(args.data, work)
        n_docs = sum(1 for line in data.read_text().splitlines() if line.strip())
        rng = np.random.default_rng(0)
        files = []
        for i in range(args.files):
            path = work / f"p{i}.pred"
            path.write_text("".join(f"{v!r}\n" for v in rng.normal(size=n_docs).tolist()))
            files.append(str(path))
        base = [sys.executable, "-m", "smoothrank", "evaluate", "--data", str(data)]
        for r in range(args.rounds):
            one = _timed([*base, "--predictions", *files])
            each = sum(_timed([*base, "--predictions", f]) for f in files)
            print(f"round {r + 1}: {args.files} files, {n_docs} documents: one call {one:.1f} s, "
                  f"one call each {each:.1f} s, ratio {each / one:.1f}x", flush=True)


if __name__ == "__main__":
    main()
