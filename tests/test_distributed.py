"""The DistributedDataParallel recipe of docs/losses.md, run under DDP: two processes on the CPU
(gloo), spawned, each holding a different share of the batch's informative queries. Its gradient
must equal the single-process gradient of ``reduction="mean"`` over the whole batch."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from smoothrank import losses

WORLD = 2
N_FEATURES = 4


def _batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """8 queries of up to 6 documents; queries 1-4 have no relevant document."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 6, N_FEATURES, generator=g, dtype=torch.float64)
    labels = torch.randint(0, 3, (8, 6), generator=g).double()
    labels[1:5] = 0.0
    mask = torch.ones(8, 6, dtype=torch.bool)
    mask[0, 4:] = mask[6, 2:] = False
    return x, labels, mask


#: Rank 0 holds queries 0-4 (one informative), rank 1 queries 5-7 (three informative).
SHARES = (slice(0, 5), slice(5, 8))


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Linear(N_FEATURES, 1, dtype=torch.float64)


def _grad(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.reshape(-1) for p in model.parameters()])


def _worker(rank: int, rendezvous: str, bound: list, out: str) -> None:
    dist.init_process_group("gloo", init_method=rendezvous, rank=rank, world_size=WORLD)
    try:
        ddp = torch.nn.parallel.DistributedDataParallel(_model())
        x, labels, mask = (t[SHARES[rank]] for t in _batch())
        results = {}
        for loss in bound:  # bound losses, pickled to reach this process
            for recipe in ("global", "naive"):
                ddp.zero_grad()
                scores = ddp(x).squeeze(-1)
                if recipe == "global":  # docs/losses.md
                    n = losses.informative_queries(loss, labels, mask=mask, dtype=scores.dtype).sum()
                    dist.all_reduce(n)
                    value = loss(scores, labels, mask=mask, reduction="sum") * WORLD / n.clamp_min(1)
                else:  # each process's own mean, which DDP averages
                    value = loss(scores, labels, mask=mask)
                value.backward()
                results[(repr(loss), recipe)] = _grad(ddp.module).clone()
        torch.save(results, Path(out) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


BOUND = [losses.get("lambda_rank", k=3), losses.get("neural_ndcg", temperature=0.5),
         losses.get("soft_ndcg", discount={"shallow": 0.5, "n": 6}), losses.get("list_net"),
         losses.get("rank_net"), losses.get("approx_ndcg")]


@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="no gloo backend")
def test_the_documented_ddp_recipe_gives_the_full_batch_gradient(tmp_path):
    mp.spawn(_worker, args=(f"file://{tmp_path / 'rendezvous'}", BOUND, str(tmp_path)), nprocs=WORLD)
    ranks = [torch.load(tmp_path / f"rank{r}.pt") for r in range(WORLD)]
    x, labels, mask = _batch()
    for loss in BOUND:
        model = _model()
        loss(model(x).squeeze(-1), labels, mask=mask).backward()
        expected = _grad(model)
        for got in ranks:  # DDP gave every process the same averaged gradient
            torch.testing.assert_close(got[(repr(loss), "global")], expected, rtol=1e-10, atol=1e-12)
        # The shares hold 1 and 3 informative queries: averaging the processes' means weighs rank
        # 0's one query three times as much as each of rank 1's, and the gradient differs.
        assert not torch.allclose(ranks[0][(repr(loss), "naive")], expected, rtol=1e-3), repr(loss)
