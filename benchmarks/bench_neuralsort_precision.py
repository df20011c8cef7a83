"""NeuralSort's logits in float64: what they cost and what they buy, measured in one run.

Usage: OMP_WAIT_POLICY=PASSIVE .venv/bin/python benchmarks/bench_neuralsort_precision.py [--rounds 5]
       [--sizes 64x30,64x240,16x1000] [--device cpu]

For float32 scores, ``smoothrank.sorting`` forms P-hat's logits ``((m + 1 - 2r) s_j - B_j) / tau``
and their softmax in float64 (``smoothrank._devices.wide_dtype``). The "float32 logits" variant
below patches that choice back to the scores' dtype; "no column floor" also removes the floor of
empty P-hat columns before Sinkhorn (2026-11-24), which is what the code did before 2026-11-23.

1. Cost: forward + backward of ``neural_ndcg`` and ``neural_ndcg_transposed`` (temperature 1,
   Sinkhorn on, 30 iterations) at each size, both variants interleaved, median of ``--rounds``.
2. Accuracy: batches of 8 lists of 200 float32 scores ``N(0, 1) * scale`` (80% real, labels
   0-2) at several temperatures; for each variant the share of 20 batches (seeds 0-19) with a
   non-finite gradient and the largest gap between a finite loss and minus the exact NDCG
   (float64 metric).
"""

from __future__ import annotations

import argparse
import statistics
import time
from contextlib import contextmanager

import torch
from _args import positive_int
from _args import sizes as sizes_arg

from smoothrank import losses, metrics, sorting


@contextmanager
def float32_logits(floor: bool = True):
    """The logits in the scores' dtype; without ``floor``, also without the eps^2 floor of empty
    P-hat columns (2026-11-24), which rescues float32 logits too: the code before 2026-11-23."""
    saved, saved_fill = sorting.wide_dtype, sorting._fill_empty_columns
    sorting.wide_dtype = lambda dtype, device: dtype
    if not floor:
        sorting._fill_empty_columns = lambda p, rf, cf: torch.zeros_like(p, dtype=torch.bool)
    try:
        yield
    finally:
        sorting.wide_dtype, sorting._fill_empty_columns = saved, saved_fill


def _step(name: str, scores: torch.Tensor, labels: torch.Tensor) -> float:
    s = scores.clone().requires_grad_()
    start = time.perf_counter()
    losses.get(name)(s, labels).backward()
    if s.device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def cost(sizes: list[tuple[int, int]], rounds: int, device: str) -> None:
    print("| loss | batch x n | float64 logits (ms) | float32 logits (ms) | ratio |")
    print("|---|---|---|---|---|")
    gen = torch.Generator().manual_seed(0)
    for b, n in sizes:
        scores = torch.randn(b, n, generator=gen).to(device)
        labels = torch.randint(0, 5, (b, n), generator=gen).float().to(device)
        for name in ("neural_ndcg", "neural_ndcg_transposed"):
            wide, narrow = [], []
            _step(name, scores, labels)  # warm-up
            with float32_logits():
                _step(name, scores, labels)
            for _ in range(rounds):
                wide.append(_step(name, scores, labels))
                with float32_logits():
                    narrow.append(_step(name, scores, labels))
            w, f = statistics.median(wide) * 1e3, statistics.median(narrow) * 1e3
            print(f"| {name} | {b} x {n} | {w:.1f} | {f:.1f} | {w / f:.2f} |")


def accuracy(device: str) -> None:
    print("\n| score scale | temperature | variant | batches with a non-finite gradient | "
          "max abs(loss + exact NDCG) |")
    print("|---|---|---|---|---|")
    for scale in (1.0, 1e4):
        for tau in (1e-2, 1e-4, 1e-6):
            for label, patch in (("float64 logits", None), ("float32 logits", True),
                                 ("float32 logits, no column floor", False)):
                bad, gap = 0, 0.0
                for seed in range(20):
                    gen = torch.Generator().manual_seed(seed)
                    s = (torch.randn(8, 200, generator=gen) * scale).to(device).requires_grad_()
                    y = torch.randint(0, 3, (8, 200), generator=gen).float().to(device)
                    mask = (torch.rand(8, 200, generator=gen) < 0.8).to(device)
                    exact = metrics.ndcg(s.detach().double(), y.double(), mask=mask).item()
                    if patch is not None:
                        with float32_logits(floor=patch):
                            loss = losses.neural_ndcg(s, y, mask=mask, temperature=tau)
                            loss.backward()
                    else:
                        loss = losses.neural_ndcg(s, y, mask=mask, temperature=tau)
                        loss.backward()
                    bad += int(not bool(torch.isfinite(s.grad).all()))
                    if torch.isfinite(loss):
                        gap = max(gap, abs(loss.item() + exact))
                print(f"| {scale:g} | {tau:g} | {label} | {bad}/20 | {gap:.2e} |")


def main() -> None:
    parser = argparse.ArgumentParser(allow_abbrev=False)
    parser.add_argument("--rounds", type=positive_int, default=5)
    parser.add_argument("--sizes", type=sizes_arg, default="64x30,64x240,16x1000",
                        help="comma-separated BATCHxN sizes")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    print(f"# torch {torch.__version__}, device {args.device}, threads {torch.get_num_threads()}, "
          f"{time.strftime('%Y-%m-%d %H:%M')}")
    cost(args.sizes, args.rounds, args.device)
    accuracy(args.device)


if __name__ == "__main__":
    main()
