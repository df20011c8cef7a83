"""Data at scale: memory and time of reading, re-opening and training on a large synthetic LETOR file.

Usage: .venv/bin/python benchmarks/bench_scale.py [--docs 1000000] [--work FOLDER]
       [--baseline /path/to/other/checkout] [--rounds 2] [--keep] [--skip-train]

Writes (once; reused while it exists) a synthetic MSLR-like training file of ``--docs`` documents x 136
features (``smoothrank.datasets.write_synthetic_letor``, about 120 documents per query, 1.2 KB a line)
and a 50k-document validation file, then runs each step in a fresh process and samples the anonymous
memory (``RssAnon`` of ``/proc/PID/status``) of the whole process tree every 10 ms:

- first read: ``load_letor(train, cache=True)`` with an empty cache folder (the conversion);
- re-open: the same call again, the store filled (its time measured inside the process);
- parse: ``load_letor(train, cache=False)``, the in-memory parse, of this checkout and, with
  ``--baseline``, of another checkout (e.g. ``git archive <commit> smoothrank | tar -x -C DIR``),
  interleaved, ``--rounds`` each (the compiled kernel loaded before the clocks start): wall and CPU
  time (``time.process_time``, all threads of the process) of the call;
- train: one epoch of ``smoothrank train`` (MLP, ListNet, signed_log1p + standardize, the 50k-document
  validation file), the store filled;
- predict: ``smoothrank predict`` of the training file with the model just trained (the store filled).

Targets (issue 36, at 1M documents): first read <= 400 MiB, re-open <= 1 s and <= 250 MiB, one
training epoch <= 900 MiB, parse not more than 20% slower than before. A bare interpreter with the
package imported holds about 150 MiB of anonymous memory; the "bare" row measures it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TARGETS = {"first read": 400, "re-open": 250, "train 1 epoch": 900}


def _tree(pid: int) -> list[int]:
    pids, stack = [], [pid]
    while stack:
        p = stack.pop()
        pids.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as handle:
                    stack.extend(int(c) for c in handle.read().split())
        except OSError:
            continue
    return pids


def _rss_anon_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def measured(cmd: list[str], env: dict[str, str], cwd: Path | None = None) -> tuple[float, float, str]:
    """Run ``cmd``; return (peak RssAnon of its process tree in MiB, wall seconds, stdout)."""
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, text=True)
        peak = 0
        while proc.poll() is None:
            peak = max(peak, sum(_rss_anon_kib(p) for p in _tree(proc.pid)))
            time.sleep(0.01)
        wall = time.perf_counter() - start
        out.seek(0)
        text = out.read()
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{text[-3000:]}")
    return peak / 1024, wall, text


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


_LOAD = ("import time, sys; from smoothrank.data import load_letor, parse_letor; "
         "parse_letor(b'0 qid:1 1:0.5\\n' * 8000); t, c = time.perf_counter(), time.process_time(); "
         "ds = load_letor(sys.argv[1], cache={cache}); "  # the kernel loaded (compiled) before the clocks
         "print('SECONDS', time.perf_counter() - t, time.process_time() - c, ds.n_docs, ds.n_features, "
         "type(ds.features).__name__)")


def _load(path: Path, env: dict[str, str], cache: bool, checkout: Path) -> tuple[float, float, float, float]:
    """(peak RssAnon MiB, process wall seconds, the call's wall seconds, the call's CPU seconds)."""
    env = {**env, "PYTHONPATH": str(checkout)}
    peak, wall, out = measured([*_python(_LOAD.format(cache=cache)), str(path)], env)
    line = next(line for line in out.splitlines() if line.startswith("SECONDS"))
    return peak, wall, float(line.split()[1]), float(line.split()[2])


def _files(work: Path, docs: int, valid_docs: int) -> tuple[Path, Path]:
    from smoothrank.datasets import write_synthetic_letor

    work.mkdir(parents=True, exist_ok=True)
    train, valid = work / f"train-{docs}.txt", work / f"valid-{valid_docs}.txt"
    for path, n_docs, seed in ((train, docs, 0), (valid, valid_docs, 1)):
        if not path.exists():
            start = time.perf_counter()
            write_synthetic_letor(path, max(1, n_docs // 120), (40, 200), 136, seed=seed)
            print(f"wrote {path} ({path.stat().st_size / 1e9:.2f} GB) in {time.perf_counter() - start:.0f} s")
    return train, valid


def _config(work: Path, train: Path, valid: Path) -> Path:
    config = {"seed": 0, "data": {"train": str(train), "valid": str(valid)},
              "model": {"kind": "mlp"}, "loss": {"name": "list_net"},
              "training": {"epochs": 1}, "transforms": ["signed_log1p", "standardize"],
              "output": {"run_dir": str(work / "run")}}
    path = work / "train.yaml"
    path.write_text(json.dumps(config))  # JSON is YAML
    return path


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("--docs", type=int, default=1_000_000)
    parser.add_argument("--work", type=Path, default=None,
                        help="folder of the generated files and the store (default: a new temporary one)")
    parser.add_argument("--baseline", type=Path, default=None,
                        help="another checkout to compare the parse with")
    parser.add_argument("--valid-docs", type=int, default=50_000, help="documents of the validation file")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--keep", action="store_true", help="keep the generated files")
    parser.add_argument("--skip-train", action="store_true")
    parser.add_argument("--config", type=Path, default=None, help="a training config (default: built here)")
    args = parser.parse_args()
    if min(args.docs, args.valid_docs, args.rounds) < 1:
        parser.error("--docs, --valid-docs and --rounds: expected positive integers")
    if args.work is None:
        args.work = Path(tempfile.mkdtemp(prefix="smoothrank-scale-"))
    train, valid = _files(args.work, args.docs, args.valid_docs)
    cache = args.work / "cache"
    shutil.rmtree(cache, ignore_errors=True)
    env = {**os.environ, "SMOOTHRANK_CACHE": str(cache), "OMP_NUM_THREADS": "2"}
    rows = []
    bare, _, _ = measured(_python("import smoothrank.data, smoothrank.datasets, numba, torch"),
                          {**env, "PYTHONPATH": str(REPO)})
    rows.append(("bare interpreter + package, numba, torch", bare, None))
    peak, wall, _, _ = _load(train, env, True, REPO)
    rows.append(("first read", peak, wall))
    for _ in range(2):
        peak, _, inner, _ = _load(train, env, True, REPO)
        rows.append(("re-open", peak, inner))
    times: dict[str, list[tuple[float, float]]] = {"this checkout": [], "baseline": []}
    for _ in range(args.rounds):  # alternating, so that a change of the machine's load hits both
        times["this checkout"].append(_load(train, env, False, REPO)[2:])
        if args.baseline is not None:
            times["baseline"].append(_load(train, env, False, args.baseline)[2:])
    if not args.skip_train:
        config = args.config or _config(args.work, train, valid)
        cmd = [sys.executable, "-m", "smoothrank", "train", str(config), "--quiet"]
        shutil.rmtree(args.work / "run", ignore_errors=True)
        peak, wall, _ = measured(cmd, {**env, "PYTHONPATH": str(REPO)})
        rows.append(("train 1 epoch", peak, wall))
        model, out = args.work / "run" / "model.pt", args.work / "train.pred"
        if model.exists():  # the trained model scores the training file (through the store)
            cmd = [sys.executable, "-m", "smoothrank", "predict", str(model), str(train), "--out", str(out)]
            peak, wall, _ = measured(cmd, {**env, "PYTHONPATH": str(REPO)})
            rows.append(("predict", peak, wall))
            out.unlink()
    print(f"\n{args.docs} documents x 136 features ({train.stat().st_size / 1e9:.2f} GB of text); "
          f"{time.strftime('%Y-%m-%d %H:%M')}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    print("| step | peak RssAnon MiB | target MiB | seconds |\n|---|---|---|---|")
    for name, mib, seconds in rows:
        target = TARGETS.get(name)
        print(f"| {name} | {mib:.0f} | {target if target else '-'} | "
              f"{'-' if seconds is None else f'{seconds:.2f}'} |")
    for name, values in times.items():
        if values:
            wall, cpu = [w for w, _ in values], [c for _, c in values]
            print(f"parse (cache=False), {name}: wall " + ", ".join(f"{w:.1f}" for w in wall)
                  + f" s (median {statistics.median(wall):.1f}); CPU " + ", ".join(f"{c:.1f}" for c in cpu)
                  + f" s (median {statistics.median(cpu):.1f})")
    if not args.keep:
        shutil.rmtree(args.work, ignore_errors=True)


if __name__ == "__main__":
    main()
