"""Which of the models' operations change their results with the thread count (CPU)?

The same inputs and seed at 1 thread and at ``--threads`` threads; for each operation the largest
difference of its output and of the gradients it returns, relative to the largest value of each
tensor (0: bit-identical). This is the
measurement behind docs/EXPERIMENTS.md's "Reproducibility" section: MLP and GBDT runs on MQ2008
were identical at 1 and 2 threads, Context-Aware Ranker runs were not (on the AMD EPYC development
machine; on an Intel Xeon with AVX-512 the MLP's rows are not 0 either: it depends on the CPU).

    .venv/bin/python benchmarks/thread_invariance.py --threads 2
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch
from _args import positive_int
from torch import Tensor, nn

from smoothrank.models import ContextAwareRanker, MLPScorer

Case = Callable[[], tuple[Tensor, list[Tensor]]]  # () -> (output, gradients), from a fixed seed


def _inputs(*shape: int) -> Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(0), requires_grad=True)


def layer_norm(rows: int, width: int) -> Case:
    norm, x = nn.LayerNorm(width), _inputs(rows, width)

    def run() -> tuple[Tensor, list[Tensor]]:
        out = norm(x)
        grads = torch.autograd.grad((out ** 3).sum(), [x, norm.weight, norm.bias])
        return out, list(grads)
    return run


def attention(batch: int, length: int, width: int, dropout: float) -> Case:
    q, k, v = (_inputs(batch, 1, length, width) for _ in range(3))

    def run() -> tuple[Tensor, list[Tensor]]:
        torch.manual_seed(5)
        out = nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=dropout)
        return out, list(torch.autograd.grad((out ** 2).sum(), [q, k, v]))
    return run


def model(net: nn.Module, batch: int, length: int, features: int, *, train: bool) -> Case:
    x = _inputs(batch, length, features)
    mask = torch.rand(batch, length, generator=torch.Generator().manual_seed(1)) > 0.3
    net.train(train)

    def run() -> tuple[Tensor, list[Tensor]]:
        torch.manual_seed(5)
        out = net(x, mask)
        return out, list(torch.autograd.grad(out.sum(), list(net.parameters())))
    return run


def largest_difference(a: list[Tensor], b: list[Tensor]) -> float:
    """Largest ``|x - y| / max |x|`` over the tensor pairs (0: every pair bit-identical)."""
    return max(float((x - y).abs().max() / x.abs().max().clamp_min(1e-30)) for x, y in zip(a, b, strict=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--threads", type=positive_int, default=2, help="compared with 1 thread")
    args = parser.parse_args()
    torch.manual_seed(0)
    cases: dict[str, Case] = {
        "nn.LayerNorm, 1920 x 96": layer_norm(1920, 96),
        "nn.LayerNorm, 15360 x 96": layer_norm(15360, 96),
        "attention, 32 lists of 60, no dropout": attention(32, 60, 96, 0.0),
        "attention, 32 lists of 60, dropout 0.1": attention(32, 60, 96, 0.1),
        "attention, 64 lists of 240, dropout 0.1": attention(64, 240, 96, 0.1),
        "MLP 128-64, dropout 0.1, 32 lists of 60": model(MLPScorer(46, hidden=[128, 64], dropout=0.1),
                                                         32, 60, 46, train=True),
        "Context-Aware Ranker, dropout 0, 32 lists of 60": model(ContextAwareRanker(46, dropout=0.0),
                                                                 32, 60, 46, train=True),
        "Context-Aware Ranker, dropout 0.1, 32 lists of 60": model(ContextAwareRanker(46), 32, 60, 46,
                                                                   train=True),
    }
    print(f"torch {torch.__version__}; 1 thread against {args.threads}; largest difference relative to "
          "the tensor's largest value\n")
    print("| operation | output | gradients |")
    print("|---|---|---|")
    for name, run in cases.items():
        results = []
        for threads in (1, args.threads):
            torch.set_num_threads(threads)
            out, grads = run()
            results.append((out.detach().clone(), [g.clone() for g in grads]))
        (out_1, grads_1), (out_n, grads_n) = results
        print(f"| {name} | {largest_difference([out_1], [out_n]):.3g} | "
              f"{largest_difference(grads_1, grads_n):.3g} |")


if __name__ == "__main__":
    main()
