"""Benchmark: training throughput (queries per second) of the scoring models.

Usage::

    OMP_WAIT_POLICY=PASSIVE .venv/bin/python benchmarks/bench_training.py              # CPU
    .venv/bin/python benchmarks/bench_training.py --device cuda --threads 16            # on a GPU

One training step = model forward on a (batch, list_size, n_features) slate, the loss, backward and
an Adam step. The Context-Aware Ranker runs at the NeuralNDCG paper's configuration (input layer 96,
2 encoder blocks, 1 head, hidden 384, tanh output; batch 64 x 240 slates, section 5.2) on MQ2008's
46 features and MSLR-WEB's 136. Inputs are random with 20% of the positions padded (anywhere in a
row), labels 0..4. The figure is the median over rounds of ``batch / step time``, after warm-up.
Models and losses alternate inside each round so that a load spike hits them alike; the load
average (``uptime``) is printed with the table. A loss named with ``-torch`` (``neural_ndcg-torch``)
runs NeuralNDCG's PyTorch path (``smoothrank.neural_kernels.USE_KERNELS = False``) where the plain
name runs its compiled CPU kernel, in the same run; ``soft_ndcg-blocked`` runs exact SoftNDCG on the
blocked kernels of its distributions (``rank_binomial.JACOBIAN_ENTRIES = 0``) where ``soft_ndcg``
runs its per-query kernel with the Jacobian.

A second table trains the paper's Context-Aware Ranker for whole epochs on the real MQ2008 Fold1
training split (471 queries, median list 8 documents, longest 121) with the paper's 64 x 240
slates, three ways: every slate padded to 240 (``training.pad: list_size``), padded to the
batch's longest list (``pad: longest``), and in addition run on 8 length groups
(``length_groups: 8``); same slates, same loss; the figure is training queries per second.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time

import torch
from _args import positive_int, set_threads

from smoothrank import losses, neural_kernels
from smoothrank.data import training_batches
from smoothrank.datasets import load_mq2008
from smoothrank.models import build_model, score_in_length_groups
from smoothrank.softrank import rank_binomial

MODELS = {
    "context_aware (paper)": {"kind": "context_aware", "input_dim": 96, "n_blocks": 2, "n_heads": 1,
                              "hidden": 384, "dropout": 0.1, "output_activation": "tanh"},
    "mlp [64, 32]": {"kind": "mlp", "hidden": [64, 32]},
}


def make_batch(batch: int, list_size: int, n_features: int, device: str, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    features = torch.randn(batch, list_size, n_features, generator=gen)
    labels = torch.randint(0, 5, (batch, list_size), generator=gen).float()
    mask = torch.rand(batch, list_size, generator=gen) > 0.2
    return features.to(device), labels.to(device), mask.to(device)


def loss_function(name: str):
    """The loss ``name``; ``<name>-torch``: the loss on NeuralNDCG's PyTorch path (no compiled kernel);
    ``soft_ndcg-blocked``: SoftNDCG on the blocked distribution kernels."""
    if name.endswith("-blocked"):
        return _blocked_soft_ndcg(losses.get(name.removesuffix("-blocked")))
    if not name.endswith("-torch"):
        return losses.get(name)
    fn = losses.get(name.removesuffix("-torch"))

    def pytorch_path(scores, labels, *, mask=None):
        neural_kernels.USE_KERNELS = False
        try:
            return fn(scores, labels, mask=mask)
        finally:
            neural_kernels.USE_KERNELS = True

    return pytorch_path


def _blocked_soft_ndcg(fn):
    def blocked(scores, labels, *, mask=None):
        saved, rank_binomial.JACOBIAN_ENTRIES = rank_binomial.JACOBIAN_ENTRIES, 0
        try:
            return fn(scores, labels, mask=mask)
        finally:
            rank_binomial.JACOBIAN_ENTRIES = saved

    return blocked


def step_seconds(model, loss_fn, optimizer, features, labels, mask, reps: int) -> float:
    def once() -> None:
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(features, mask), labels, mask=mask)
        loss.backward()
        optimizer.step()

    once()  # warm-up
    if features.is_cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(reps):
        once()
    if features.is_cuda:
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / reps


PADDINGS = {"pad to list_size (240)": ("list_size", 1), "pad to the batch's longest": ("longest", 1),
            "longest + 8 length groups": ("longest", 8)}


def epoch_seconds(model, loss_fn, optimizer, dataset, *, pad: str, groups: int, device: str,
                  seed: int) -> float:
    start = time.perf_counter()
    for batch in training_batches(dataset, list_size=240, batch_size=64, seed_or_generator=seed, pad=pad):
        mask = batch.mask.to(device)
        optimizer.zero_grad(set_to_none=True)
        scores = score_in_length_groups(model, batch.features.to(device), mask, groups=groups)
        loss_fn(scores, batch.labels.to(device), mask=mask).backward()
        optimizer.step()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return time.perf_counter() - start


def mq2008_epochs(args: argparse.Namespace) -> None:
    dataset = load_mq2008(fold=1, split="train")
    model = build_model(dict(MODELS["context_aware (paper)"]), dataset.n_features).to(args.device).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = losses.get("neural_ndcg")
    times: dict[tuple[str, str], list[float]] = {}
    for r in range(args.rounds + 1):  # round 0 is warm-up
        for name, (pad, groups) in PADDINGS.items():
            seconds = epoch_seconds(model, loss_fn, optimizer, dataset, pad=pad, groups=groups,
                                    device=args.device, seed=r)
            if r:
                times.setdefault((name, "neural_ndcg"), []).append(seconds)
    print(f"\nMQ2008 Fold1 train ({dataset.n_queries} queries), context_aware (paper), neural_ndcg, "
          "64 x 240 slates, one epoch:\n")
    print("| padding | epoch (s) | queries / s | speed-up |")
    print("|---|---|---|---|")
    base = statistics.median(next(iter(times.values())))
    for (name, _), values in times.items():
        median = statistics.median(values)
        print(f"| {name} | {median:.2f} | {dataset.n_queries / median:.0f} | {base / median:.1f}x |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=positive_int, default=2)
    parser.add_argument("--rounds", type=positive_int, default=3)
    parser.add_argument("--reps", type=positive_int, default=3)
    parser.add_argument("--batch", type=positive_int, default=64)
    parser.add_argument("--list-size", type=positive_int, default=240)
    parser.add_argument("--features", type=positive_int, nargs="+", default=[46, 136])
    parser.add_argument("--losses", default="neural_ndcg,lambda_rank,soft_ndcg")
    parser.add_argument("--skip-mq2008", action="store_true", help="only the synthetic-slate table")
    args = parser.parse_args()
    set_threads(args.threads)  # Numba's too: soft_ndcg's kernels
    torch.manual_seed(0)

    cases = []
    for n_features in args.features:
        batch = make_batch(args.batch, args.list_size, n_features, args.device)
        for model_name, spec in MODELS.items():
            model = build_model(dict(spec), n_features).to(args.device).train()
            optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
            for loss_name in args.losses.split(","):
                cases.append(((model_name, n_features, loss_name), model, loss_function(loss_name),
                              optimizer, batch))
    times: dict[tuple, list[float]] = {key: [] for key, *_ in cases}
    for _ in range(args.rounds):
        for key, model, loss_fn, optimizer, (features, labels, mask) in cases:
            times[key].append(step_seconds(model, loss_fn, optimizer, features, labels, mask, args.reps))

    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    print(f"device {args.device}, {args.threads} threads, float32, batch {args.batch} x {args.list_size}, "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '(unset)')}, torch {torch.__version__}")
    print(f"load: {load}\n")
    print("| model | features | loss | step (ms) | queries / s |")
    print("|---|---|---|---|---|")
    for (model_name, n_features, loss_name), values in times.items():
        median = statistics.median(values)
        print(f"| {model_name} | {n_features} | {loss_name} | {median * 1e3:.0f} | "
              f"{args.batch / median:.0f} |")
    if not args.skip_mq2008:
        mq2008_epochs(args)


if __name__ == "__main__":
    main()
