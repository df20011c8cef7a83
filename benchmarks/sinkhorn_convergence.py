"""How far NeuralNDCG's Sinkhorn scaling is from doubly stochastic after ``max_iter`` iterations.

For one query of ``n`` N(0, 1) scores and labels 0-4 (seed 0) at temperature ``--temperature``: the
marginal error that :func:`smoothrank.sorting.neural_sort_bilinear` returns (the largest distance of
a real row or column sum from 1) and minus NeuralNDCG, at each of ``--iterations``. The loss does
not report the error; this measures what the paper's 30 iterations leave on long lists.

    .venv/bin/python benchmarks/sinkhorn_convergence.py --sizes 200,2000 --iterations 30,1000
"""

from __future__ import annotations

import argparse

import torch
from _args import positive_int

from smoothrank import losses, sorting


def _ints(text: str) -> list[int]:
    return [positive_int(part) for part in text.split(",") if part.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--sizes", type=_ints, default=[200, 2000], help="list lengths, comma-separated")
    parser.add_argument("--iterations", type=_ints, default=[30, 1000], help="max_iter values")
    parser.add_argument("--temperature", type=float, default=1.0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print("| n | max_iter | marginal error | loss |")
    print("|---|---|---|---|")
    for n in args.sizes:
        gen = torch.Generator().manual_seed(0)
        scores = torch.randn(1, n, generator=gen)
        labels = torch.randint(0, 5, (1, n), generator=gen).float()
        discounts = 1.0 / torch.log2(torch.arange(2, n + 2, dtype=torch.float32))[None]
        for max_iter in args.iterations:
            _, error = sorting.neural_sort_bilinear(scores, discounts, 2.0 ** labels - 1.0,
                                                    temperature=args.temperature, max_iter=max_iter)
            loss = losses.neural_ndcg(scores, labels, temperature=args.temperature, max_iter=max_iter)
            print(f"| {n} | {max_iter} | {error.item():.2e} | {loss.item():.6f} |")


if __name__ == "__main__":
    main()
