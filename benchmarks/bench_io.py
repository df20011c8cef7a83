"""Reading speed: smoothrank's load_letor against scikit-learn's load_svmlight_file(query_id=True).

Usage: OMP_WAIT_POLICY=PASSIVE .venv/bin/python benchmarks/bench_io.py [--rounds 5]
Reads from ../shared/data (benchmarks may use it; the package never does). Both readers get the
same decompressed bytes from memory, interleaved, several rounds; medians are reported. Also
times a cached second load (from a temporary cache folder).
"""

from __future__ import annotations

import argparse
import gzip
import io
import os
import statistics
import tempfile
import time
from pathlib import Path

from sklearn.datasets import load_svmlight_file

from smoothrank.data import load_letor, parse_letor

SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
FILES = ["MQ2008/Fold1/train.txt.gz", "MSLR-WEB-Fold1-5k-sample/msn1.fold1.train.5k.txt.gz"]


def _time(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as cache:
        os.environ["SMOOTHRANK_CACHE"] = cache
        for name in FILES:
            path = SHARED / name
            data = gzip.decompress(path.read_bytes())
            ours, theirs, cached = [], [], []
            load_letor(path, cache=True)  # fill the cache
            for _ in range(args.rounds):
                theirs.append(_time(lambda d=data: load_svmlight_file(io.BytesIO(d), query_id=True)))
                ours.append(_time(lambda d=data: parse_letor(d)))
                cached.append(_time(lambda p=path: load_letor(p, cache=True)))
            t_ours, t_theirs, t_cached = map(statistics.median, (ours, theirs, cached))
            print(f"{name}: {len(data) / 1e6:.1f} MB text | sklearn {t_theirs * 1e3:.0f} ms | "
                  f"smoothrank {t_ours * 1e3:.0f} ms ({t_ours / t_theirs:.2f}x sklearn) | "
                  f"cached load {t_cached * 1e3:.1f} ms ({t_ours / t_cached:.0f}x faster than parsing)")


if __name__ == "__main__":
    main()
