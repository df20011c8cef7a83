"""Serving latency: one query of 100 documents through the Python API and each export format, and
the cold start (a fresh process: import, load, first score).

    OMP_WAIT_POLICY=PASSIVE .venv/bin/python benchmarks/bench_serving.py

Models: untrained weights (latency does not depend on their values) of the MLP (64 hidden units)
and the Context-Aware Ranker (the paper's size: input 96, 2 blocks, 1 head, hidden 384), with
``standardize`` and ``query_minmax`` fitted on MQ2008 Fold1's training split (bundled), 46 features.
Paths: ``python api`` (``smoothrank.load_model(path).score_query(matrix)``: numpy in, numpy out),
``torchscript`` (``torch.jit.load``), ``exported-program`` (``torch.export.load(...).module()``),
``onnxruntime`` (CPU execution provider), each fed one (1, 100, 46) batch with its mask.
Prints median and 90th-percentile latency over ``--reps`` calls after 10 warm-up calls, per
``--rounds`` (each row: the rounds' medians), and the cold start of ``--cold-runs`` fresh processes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _args import positive_int, set_threads

MODELS = {
    "linear": {"kind": "linear"},
    "mlp": {"kind": "mlp", "hidden": [64]},
    "context_aware": {"kind": "context_aware"},
}
FORMATS = ("torchscript", "exported-program", "onnx")
SUFFIX = {"torchscript": "ts", "exported-program": "pt2", "onnx": "onnx"}

COLD = """
import time
start = time.perf_counter()
import numpy as np
import smoothrank
imported = time.perf_counter()
model = smoothrank.load_model({path!r})
loaded = time.perf_counter()
model.score_query(np.ones((100, model.n_features), np.float32))
scored = time.perf_counter()
print(imported - start, loaded - imported, scored - loaded)
"""

COLD_ORT = """
import time
start = time.perf_counter()
import numpy as np
import onnxruntime
imported = time.perf_counter()
session = onnxruntime.InferenceSession({path!r}, providers=["CPUExecutionProvider"])
loaded = time.perf_counter()
n = session.get_inputs()[0].shape[2]
feed = {{"features": np.ones((1, 100, n), np.float32)}}
if len(session.get_inputs()) > 1:
    feed["mask"] = np.ones((1, 100), bool)
session.run(None, feed)
scored = time.perf_counter()
print(imported - start, loaded - imported, scored - loaded)
"""


def _artifact(folder: Path, kind: str) -> Path:
    import torch

    from smoothrank.data.transforms import Compose, QueryMinMax, Standardize
    from smoothrank.datasets import load_mq2008
    from smoothrank.models import build_model
    from smoothrank.training import save_model
    from smoothrank.training.config import config_from_dict

    train = load_mq2008(1, "train")
    torch.manual_seed(0)
    network = build_model(MODELS[kind], train.n_features).eval()
    state = Compose([Standardize(), QueryMinMax()]).fit(train).state_dict()
    config = config_from_dict({"data": {"mq2008_fold": 1}, "model": MODELS[kind]})
    path = folder / f"{kind}.pt"
    save_model(path, network, config=config, n_features=train.n_features, transform_state=state)
    return path


def _callers(path: Path, formats: list[str], folder: Path, x: np.ndarray) -> dict[str, object]:
    """name -> a call scoring one query of ``x`` (100, F)."""
    import torch

    import smoothrank
    from smoothrank.export import export_model

    model = smoothrank.load_model(path)
    features, mask = torch.from_numpy(x[None]), torch.ones((1, x.shape[0]), dtype=torch.bool)
    calls: dict[str, object] = {"python api": lambda: model.score_query(x)}
    for fmt in formats:
        out = folder / f"{path.stem}.{SUFFIX[fmt]}"
        with_mask = export_model(path, out, format=fmt)
        args = (features, mask) if with_mask else (features,)
        if fmt == "onnx":
            import onnxruntime

            session = onnxruntime.InferenceSession(str(out), providers=["CPUExecutionProvider"])
            feed = {"features": x[None], **({"mask": mask.numpy()} if with_mask else {})}
            calls["onnxruntime"] = lambda session=session, feed=feed: session.run(None, feed)
            continue
        module = torch.jit.load(str(out)) if fmt == "torchscript" else torch.export.load(str(out)).module()

        def call(module=module, args=args):
            with torch.no_grad():
                return module(*args)

        calls[fmt] = call
    return calls


def _latency(call, reps: int) -> tuple[float, float]:
    for _ in range(10):
        call()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return float(np.median(times)) * 1e3, float(np.percentile(times, 90)) * 1e3


def _cold(code: str, runs: int) -> list[list[float]]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    found = []
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                              check=True)
        wall = time.perf_counter() - start
        found.append([*json.loads("[" + ",".join(done.stdout.split()) + "]"), wall])
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mlp,context_aware", help="comma-separated: " + ", ".join(MODELS))
    parser.add_argument("--formats", default=",".join(FORMATS), help="comma-separated: " + ", ".join(FORMATS))
    parser.add_argument("--docs", type=positive_int, default=100)
    parser.add_argument("--reps", type=positive_int, default=200)
    parser.add_argument("--rounds", type=positive_int, default=3)
    parser.add_argument("--cold-runs", type=positive_int, default=3)
    parser.add_argument("--threads", type=positive_int, default=1)
    args = parser.parse_args()
    formats = [f for f in args.formats.split(",") if f]
    unknown = [f for f in formats if f not in FORMATS]
    if unknown:
        parser.error(f"--formats: unknown format(s) {unknown}; expected some of {list(FORMATS)}")
    unknown = [m for m in args.models.split(",") if m not in MODELS]
    if unknown:
        parser.error(f"--models: unknown model(s) {unknown}; expected some of {list(MODELS)}")
    set_threads(args.threads)
    print(f"# {time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}, "
          f"threads {args.threads}, one query of {args.docs} documents")
    print("| model | path | median ms (rounds) | p90 ms (rounds) |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for kind in args.models.split(","):
            path = _artifact(folder, kind)
            x = np.random.default_rng(0).normal(size=(args.docs, 46)).astype(np.float32)
            for name, call in _callers(path, formats, folder, x).items():
                rounds = [_latency(call, args.reps) for _ in range(args.rounds)]
                med = ", ".join(f"{m:.3f}" for m, _ in rounds)
                p90 = ", ".join(f"{p:.3f}" for _, p in rounds)
                print(f"| {kind} | {name} | {med} | {p90} |")
        print()
        print("| model | cold start | import s | load s | first score s | process wall s |")
        print("|---|---|---|---|---|---|")
        for kind in args.models.split(","):
            path = folder / f"{kind}.pt"
            cases = [("python api", COLD.format(path=str(path)))]
            if "onnx" in formats:
                cases.append(("onnxruntime", COLD_ORT.format(path=str(folder / f"{kind}.onnx"))))
            for name, code in cases:
                runs = _cold(code, args.cold_runs)
                cols = [", ".join(f"{run[i]:.2f}" for run in runs) for i in range(4)]
                print(f"| {kind} | {name} | " + " | ".join(cols) + " |")


if __name__ == "__main__":
    main()
