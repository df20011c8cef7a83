"""The DistributedDataParallel recipe of docs/losses.md, run under DDP: two processes on the CPU
(gloo), spawned, each holding a different share of the batch's informative queries. Its gradient
must equal the single-process gradient of ``reduction="mean"`` over the whole batch."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import yaml

from smoothrank import losses

REPO = Path(__file__).resolve().parent.parent

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


# ------------------------------------------------------------------ smoothrank train under torchrun
def test_the_torchrun_environment_is_read_and_refused_by_name():
    from smoothrank.errors import ConfigError
    from smoothrank.training.distributed import Group, environment

    assert environment({}) is None and environment({"WORLD_SIZE": "1"}) is None
    env = {"WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "1", "MASTER_ADDR": "127.0.0.1"}
    assert environment(env) == Group(rank=3, world_size=4, local_rank=1)
    for broken, match in ((({**env, "RANK": "4"}), "RANK: 4 for WORLD_SIZE 4"),
                          ({k: v for k, v in env.items() if k != "LOCAL_RANK"}, "LOCAL_RANK is not set"),
                          ({**env, "WORLD_SIZE": "two"}, "WORLD_SIZE: expected an integer"),
                          ({k: v for k, v in env.items() if k != "MASTER_ADDR"}, "MASTER_ADDR is not set")):
        with pytest.raises(ConfigError, match=match):
            environment(broken)


def _torchrun(args: list[str], cwd: Path, **popen: object) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
               "-m", "smoothrank", *args]
    return subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, **popen)


def _workers(pid: int) -> list[int]:
    """The processes torchrun started (each in its own session: killing torchrun's group spares them)."""
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _finish(process: subprocess.Popen, timeout: float = 240) -> tuple[int, str, str]:
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        for worker in _workers(process.pid):
            os.kill(worker, signal.SIGKILL)
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        pytest.fail(f"torchrun hung past {timeout} s:\n{err[-3000:]}")
    return process.returncode, out, err


@pytest.mark.slow
@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="no gloo backend")
def test_torchrun_trains_as_one_process_and_resumes_after_a_kill(tmp_path):
    from conftest import write_synthetic_folds

    from smoothrank.data import load_letor
    from smoothrank.training.artifact import load_model
    from smoothrank.training.config import config_from_dict
    from smoothrank.training.trainer import train

    write_synthetic_folds(tmp_path, seed=5, queries=(37, 11, 9), docs=10)
    settings = {
        "seed": 0, "data": {"train": "train.txt", "valid": "vali.txt", "test": "test.txt"},
        "model": {"kind": "mlp", "hidden": [16]}, "loss": {"name": "neural_ndcg"}, "optimizer": {"lr": 0.01},
        # 37 queries, 12 a step: the last step's one query leaves process 1 an empty share
        "training": {"epochs": 40, "batch_size": 12, "list_size": 10, "num_threads": 1,
                     "distributed_timeout": 60},
        "evaluation": {"metrics": ["ndcg@5", "map"], "select_by": "ndcg@5"},
        "output": {"run_dir": "runs/two"},
    }
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(settings))
    # one process killed once an epoch is checkpointed: torchrun stops the other, no hang
    process = _torchrun(["train", "c.yaml", "--quiet"], tmp_path)
    log = tmp_path / "runs" / "two" / "metrics.jsonl"
    deadline = time.monotonic() + 240
    while not (log.is_file() and log.read_text().count("\n") >= 1) and process.poll() is None:
        assert time.monotonic() < deadline, "no epoch within 240 s"
        time.sleep(0.05)
    workers = _workers(process.pid)
    assert len(workers) == 2, workers
    os.kill(workers[-1], signal.SIGKILL)
    code, _, err = _finish(process, timeout=120)
    assert code != 0, err[-3000:]
    assert not any(Path(f"/proc/{w}").exists() for w in workers)  # both workers ended
    done = log.read_text().count("\n")
    assert 1 <= done < 40, done
    code, out, err = _finish(_torchrun(["train", "c.yaml", "--resume"], tmp_path))
    assert code == 0, err[-3000:]
    # process 0 wrote the run folder, and nothing else was written
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["two"]
    assert sorted(p.name for p in (tmp_path / "runs" / "two").iterdir()) == [
        "checkpoint.pt", "config.yaml", "metrics.jsonl", "model.pt", "summary.json"]
    assert out.count("best epoch") == 1  # printed once, by process 0

    # one process, uninterrupted: the same epochs up to float summation order
    data = {k: str(tmp_path / v) for k, v in settings["data"].items()}
    config = config_from_dict({**settings, "data": data, "output": {"run_dir": str(tmp_path / "one")}})
    single = train(config, quiet=True)
    two = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(two) == len(single.history) == 40
    for a, b in zip(two, single.history, strict=True):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5, abs=1e-6)
        assert a["valid_ndcg@5"] == pytest.approx(b["valid_ndcg@5"], abs=1e-9)
    summary = json.loads((tmp_path / "runs" / "two" / "summary.json").read_text())
    assert summary["best_epoch"] == single.best_epoch
    for split, metrics in (("valid", single.valid_metrics), ("test", single.test_metrics)):
        assert summary[split] == pytest.approx(metrics, abs=1e-9)
    model = load_model(tmp_path / "runs" / "two" / "model.pt")
    for name, value in single.model.state_dict().items():
        if value.numel() == 1:
            # the output bias: a ranking loss is blind to a shift of every score, and Adam turns the
            # rounding-level gradient it gets into steps of the learning rate's size
            continue
        torch.testing.assert_close(model.model.state_dict()[name], value, rtol=1e-4, atol=1e-5)

    # its model.pt scores with smoothrank predict
    code, _, err = _finish(subprocess.Popen(
        [sys.executable, "-m", "smoothrank", "predict", "runs/two/model.pt", "test.txt", "--out", "p.txt"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)}), timeout=120)
    assert code == 0, err
    expected = single.model.eval()
    test = load_letor(tmp_path / "test.txt")
    with torch.no_grad():
        scores = expected(torch.as_tensor(test.features)[None], torch.ones(1, test.n_docs, dtype=torch.bool))
    got, want = np.loadtxt(tmp_path / "p.txt"), scores[0].double().numpy()
    np.testing.assert_allclose(got - got.mean(), want - want.mean(), rtol=1e-4, atol=1e-4)

    # a run process 0 refuses (the folder holds a finished run) stops both processes, no hang
    code, _, err = _finish(_torchrun(["train", "c.yaml"], tmp_path), timeout=180)
    assert code != 0 and "already holds a run; pass --resume" in err


def _stalled_worker(rank: int, port: int, out: str) -> None:
    """Process 1 never reaches the collective; process 0 must fail after the group's timeout."""
    os.environ.update({"RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_RANK": str(rank),
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    from smoothrank.training.distributed import process_group

    with process_group("cpu", timeout_s=3) as group:
        assert group is not None and group.rank == rank
        if rank == 1:
            time.sleep(15)
            return
        started = time.monotonic()
        try:
            dist.all_reduce(torch.ones(1))
            outcome = "returned"
        except RuntimeError as err:
            outcome = f"raised {type(err).__name__}: {str(err)[:200]}"
        Path(out).write_text(json.dumps({"outcome": outcome, "seconds": time.monotonic() - started}))


@pytest.mark.slow
@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="no gloo backend")
def test_a_collective_that_one_process_never_joins_fails_after_the_timeout(tmp_path):
    import socket

    with socket.socket() as s:  # a free loopback port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_stalled_worker, args=(port, str(tmp_path / "rank0.json")), nprocs=2)
    seen = json.loads((tmp_path / "rank0.json").read_text())
    assert seen["outcome"].startswith("raised"), seen
    assert seen["seconds"] < 14, seen  # the timeout (3 s), not process 1's return
