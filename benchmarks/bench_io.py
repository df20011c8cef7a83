"""Reading speed: smoothrank's reader against scikit-learn's load_svmlight_file(query_id=True).

Usage: OMP_WAIT_POLICY=PASSIVE .venv/bin/python benchmarks/bench_io.py [--rounds 5] [--files SUBSTRING]

Reads every file in ../shared/data, or $SMOOTHRANK_SHARED/data where that is set (benchmarks may use
it; the package never does): the 15 MQ2008
fold files, the MSLR sample (CRLF) and the LightGBM example files (group sizes from `.query`), plus a
synthetic MSLR-like file (``smoothrank.datasets.write_synthetic_letor``, ``--synthetic-docs`` documents
x 136 features, gzip like the others; 0 leaves it out).
All readers get the same decompressed bytes from memory and run interleaved, several rounds;
medians are reported:
- sklearn: ``load_svmlight_file(BytesIO(text), query_id=True)``;
- smoothrank: ``parse_letor(text)``, the uncached parse (compiled scanner, strict fallback);
- strict: the strict vectorised parser alone (what ``parse_letor`` was before the scanner, and
  what it still falls back to for doubtful input and to report errors);
- cached: ``load_letor(path, cache=True)`` from a filled cache (temporary cache folder).
Also reports the one-time cost of the first call in this process (Numba import and loading the
compiled kernel from its on-disk cache, or compiling it on a fresh install).
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

import numpy as np
from _args import positive_int

try:
    from sklearn.datasets import load_svmlight_file
except ImportError:  # a runtime-only environment (scripts/demo's)
    raise SystemExit("bench_io.py compares with scikit-learn, a test dependency: "
                     "run `source scripts/env.sh test` first") from None

from smoothrank.data import letor, load_letor, parse_letor
from smoothrank.datasets import write_synthetic_letor

# The shared data folder: beside the checkout, or where SMOOTHRANK_SHARED says (as for the tests).
_BESIDE = Path(__file__).resolve().parent.parent.parent / "shared"
SHARED = Path(os.environ.get("SMOOTHRANK_SHARED") or _BESIDE) / "data"


def _files() -> list[Path]:
    splits = ("train", "vali", "test")
    mq = [SHARED / f"MQ2008/Fold{k}/{split}.txt.gz" for k in range(1, 6) for split in splits]
    mslr = sorted((SHARED / "MSLR-WEB-Fold1-5k-sample").glob("*.txt.gz"))
    lgbm = [SHARED / "LightGBM-lambdarank/rank.train.gz", SHARED / "LightGBM-lambdarank/rank.test.gz"]
    return mq + mslr + lgbm


def _time(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _strict(data: bytes, sizes: np.ndarray | None):
    return letor._parse_lines([data.splitlines(keepends=True)], source="<bytes>",
                              options=letor.ReaderOptions(), query_sizes=sizes, query_source="query_sizes")


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("--rounds", type=positive_int, default=5)
    parser.add_argument("--files", default="", help="only files whose path contains this")
    parser.add_argument("--synthetic-docs", type=int, default=24_000,
                        help="documents of the synthetic file (about 120 per query); 0: none")
    args = parser.parse_args()
    if not SHARED.is_dir():
        parser.error(f"the shared data folder is missing: {SHARED} "
                     "(set SMOOTHRANK_SHARED to the folder holding data/)")
    first = _time(lambda: parse_letor(b"0 qid:1 1:0.5\n" * 8000))  # over FAST_MIN_BYTES: loads numba
    print(f"first call in this process (numba import + kernel load): {first * 1e3:.0f} ms\n")
    print("| file | MB | sklearn ms | smoothrank ms | ratio | strict (before) ms | ratio | cached ms |")
    print("|---|---|---|---|---|---|---|---|")
    ratios = []
    with tempfile.TemporaryDirectory() as cache:
        os.environ["SMOOTHRANK_CACHE"] = str(Path(cache) / "store")
        files = [(path, str(path.relative_to(SHARED))) for path in _files()]
        if args.synthetic_docs > 0 and args.files in "synthetic":
            plain = write_synthetic_letor(Path(cache) / "synthetic.txt", max(1, args.synthetic_docs // 120),
                                          120, 136, seed=0)
            synthetic = Path(cache) / "synthetic.txt.gz"
            synthetic.write_bytes(gzip.compress(plain.read_bytes(), compresslevel=1))
            plain.unlink()
            files.append((synthetic, f"synthetic {args.synthetic_docs // 120 * 120} docs x 136"))
        for path, name in files:
            if args.files not in name:
                continue
            data = gzip.decompress(path.read_bytes())
            side = Path(str(path).removesuffix(".gz") + ".query")
            sizes = np.loadtxt(side, dtype=np.int64, ndmin=1) if side.exists() else None
            load_letor(path, cache=True)  # fill the cache
            runs: dict[str, list[float]] = {"sk": [], "ours": [], "strict": [], "cached": []}
            for _ in range(args.rounds):
                runs["sk"].append(_time(lambda d=data: load_svmlight_file(io.BytesIO(d), query_id=True)))
                runs["ours"].append(_time(lambda d=data, s=sizes: parse_letor(d, query_sizes=s)))
                runs["strict"].append(_time(lambda d=data, s=sizes: _strict(d, s)))
                runs["cached"].append(_time(lambda p=path: load_letor(p, cache=True)))
            t = {key: statistics.median(values) for key, values in runs.items()}
            ratios.append(t["ours"] / t["sk"])
            print(f"| {name} | {len(data) / 1e6:.1f} | {t['sk'] * 1e3:.0f} | {t['ours'] * 1e3:.1f} | "
                  f"{t['ours'] / t['sk']:.2f}x | {t['strict'] * 1e3:.0f} | {t['strict'] / t['sk']:.2f}x | "
                  f"{t['cached'] * 1e3:.1f} |")
    if ratios:
        print(f"\nsmoothrank / sklearn time: worst {max(ratios):.2f}x, "
              f"median {statistics.median(ratios):.2f}x over {len(ratios)} files ({args.rounds} rounds each)")


if __name__ == "__main__":
    main()
