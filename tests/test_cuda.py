"""The same results on a CUDA device as on the CPU: every loss, the closed-form Hessian diagonals, the
metrics, SoftRank, the models and the trainer. Skipped where no CUDA device exists (CI has none); run
on a GPU machine with ``.venv/bin/python -m pytest tests/test_cuda.py`` (docs/BENCHMARKS.md records
the last such run).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from conftest import write_synthetic_folds

from smoothrank import losses
from smoothrank.data import load_letor
from smoothrank.metrics import LETOR4_METRICS, evaluate, pairwise_error
from smoothrank.models import build_model
from smoothrank.softrank import soft_rank
from smoothrank.training.artifact import load_model
from smoothrank.training.config import config_from_dict
from smoothrank.training.trainer import MODEL_FILE, train

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

CUDA = torch.device("cuda")


def _slates(dtype: torch.dtype = torch.float64, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """Scores, graded labels and a mask with the hard rows: ties, padding in the middle of a row,
    a list of length 1, a query with no relevant document, a fully padded row, huge scores."""
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(6, 12, generator=g, dtype=dtype)
    labels = torch.randint(0, 3, (6, 12), generator=g).to(dtype)
    mask = torch.ones(6, 12, dtype=torch.bool)
    mask[0, 3:6] = False          # padding inside a row
    scores[1, :6] = 0.25          # tied scores
    mask[2, 1:] = False           # a list of length 1
    labels[3] = 0                 # no relevant document
    mask[4] = False               # fully padded
    scores[5] *= 1e4              # huge scores
    return scores, labels, mask


@pytest.mark.parametrize("name", losses.available())
def test_every_loss_gives_the_cpu_value_and_gradient_on_cuda(name: str) -> None:
    scores, labels, mask = _slates()
    # random tie-breaks (ListMLE) are drawn on the generator's device: a seed gives the same draw
    seeded = {"generator": 0} if "generator" in losses.options(name) else {}
    on_cpu = scores.clone().requires_grad_(True)
    value_cpu = losses.get(name, **seeded)(on_cpu, labels, mask=mask)
    value_cpu.backward()
    on_gpu = scores.to(CUDA).requires_grad_(True)
    value_gpu = losses.get(name, **seeded)(on_gpu, labels.to(CUDA), mask=mask.to(CUDA))
    value_gpu.backward()
    assert value_gpu.device.type == "cuda" and on_gpu.grad is not None
    torch.testing.assert_close(value_gpu.cpu(), value_cpu, rtol=1e-7, atol=1e-9)
    torch.testing.assert_close(on_gpu.grad.cpu(), on_cpu.grad, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("name", losses.available())
def test_every_loss_is_finite_in_float32_on_cuda(name: str) -> None:
    scores, labels, mask = _slates(torch.float32, seed=1)
    on_gpu = scores.to(CUDA).requires_grad_(True)
    value = losses.get(name)(on_gpu, labels.to(CUDA), mask=mask.to(CUDA), reduction="none")
    value.sum().backward()
    assert torch.isfinite(value).all() and torch.isfinite(on_gpu.grad).all()


@pytest.mark.parametrize("name", [name for name in losses.available() if losses.info(name).hessian_diagonal])
def test_the_closed_form_hessian_diagonal_on_cuda_equals_the_cpu_value(name: str) -> None:
    from smoothrank import boosting

    diagonal = losses.info(name).hessian_diagonal
    options = {"k": 5} if "k" in losses.options(name) else {}
    scores, labels, mask = _slates()
    cpu = diagonal(scores, labels, mask=mask, reduction="sum", **options)
    gpu = diagonal(scores.to(CUDA), labels.to(CUDA), mask=mask.to(CUDA), reduction="sum", **options)
    assert gpu.device.type == "cuda"
    torch.testing.assert_close(gpu.cpu(), cpu, rtol=1e-7, atol=1e-12)
    # the boosters' objective computed on the device
    s, y = np.random.default_rng(0).normal(size=30), np.arange(30) % 3
    on_cpu = boosting.boosting_gradients(name, s, y, [12, 18], hessian="diagonal")
    on_gpu = boosting.boosting_gradients(name, s, y, [12, 18], hessian="diagonal", device=CUDA)
    for a, b in zip(on_gpu, on_cpu, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-7, atol=1e-12)


def test_metrics_on_cuda_equal_the_cpu_values() -> None:
    scores, labels, mask = _slates()
    for convention in ("letor4", "lightgbm", "trec"):
        cpu = evaluate(scores, labels, mask=mask, metrics=LETOR4_METRICS, convention=convention)
        gpu = evaluate(scores.to(CUDA), labels.to(CUDA), mask=mask.to(CUDA), metrics=LETOR4_METRICS,
                       convention=convention)
        for metric, value in cpu.items():
            torch.testing.assert_close(gpu[metric].cpu(), value, equal_nan=True, msg=metric)


def test_pairwise_error_on_cuda_equals_the_cpu_value() -> None:
    scores, labels, mask = _slates()
    for normalize in (False, True):
        cpu = pairwise_error(scores, labels, mask=mask, normalize=normalize, reduction="none")
        gpu = pairwise_error(scores.to(CUDA), labels.to(CUDA), mask=mask.to(CUDA), normalize=normalize,
                             reduction="none")
        assert gpu.device.type == "cuda"
        torch.testing.assert_close(gpu.cpu(), cpu, equal_nan=True)


@pytest.mark.parametrize("method", ["exact", "hybrid", "normal"])
def test_soft_rank_torch_backend_on_cuda_matches_the_cpu_kernels(method: str) -> None:
    scores, _, mask = _slates()
    scores[5] /= 1e4  # keep the rank distributions away from one-hot, where both are trivially equal
    cpu = soft_rank(scores, sigma=0.5, mask=mask, method=method)
    gpu = soft_rank(scores.to(CUDA), sigma=0.5, mask=mask.to(CUDA), method=method)
    torch.testing.assert_close(gpu.cpu(), cpu, rtol=1e-7, atol=1e-10)


@pytest.mark.parametrize("spec", [
    {"kind": "mlp", "hidden": [16, 8], "dropout": 0.0},
    {"kind": "context_aware", "input_dim": 16, "n_blocks": 2, "n_heads": 2, "hidden": 32, "dropout": 0.0},
])
def test_models_score_the_same_on_cuda(spec: dict) -> None:
    torch.manual_seed(0)
    model = build_model(spec, n_features=7).double().eval()
    features = torch.randn(3, 10, 7, dtype=torch.float64)
    mask = torch.ones(3, 10, dtype=torch.bool)
    mask[1, 6:] = False
    expected = model(features, mask)
    got = model.to(CUDA)(features.to(CUDA), mask.to(CUDA))
    torch.testing.assert_close(got.cpu()[mask], expected[mask], rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("loss", ["neural_ndcg", "soft_ndcg", "lambda_rank"])
def test_training_on_cuda_learns_and_the_artifact_loads_on_the_cpu(loss: str, tmp_path) -> None:
    (tmp_path / "data").mkdir()
    folds = write_synthetic_folds(tmp_path / "data", seed=5, queries=(40, 10, 10), docs=12)
    config = config_from_dict({
        "seed": 0,
        "data": {"train": str(folds / "train.txt"), "valid": str(folds / "vali.txt"),
                 "test": str(folds / "test.txt")},
        "model": {"kind": "context_aware", "input_dim": 16, "n_blocks": 1, "n_heads": 2, "hidden": 32},
        "loss": {"name": loss},
        "optimizer": {"lr": 0.01},
        "training": {"epochs": 6, "batch_size": 8, "list_size": 12, "device": "cuda"},
        "evaluation": {"metrics": ["ndcg@5", "map"], "select_by": "ndcg@5"},
        "output": {"run_dir": str(tmp_path / "run")},
    })
    result = train(config, quiet=True)
    first, best = result.history[0], max(row["valid_ndcg@5"] for row in result.history)
    assert all(math.isfinite(row["loss"]) for row in result.history)
    assert best > first["valid_ndcg@5"]  # the synthetic task is learnable: it must improve
    assert result.test_metrics["ndcg@5"] > 0.5
    artifact = load_model(tmp_path / "run" / MODEL_FILE)
    assert next(artifact.model.parameters()).device.type == "cpu"
    scores = artifact.score(load_letor(folds / "test.txt"))
    assert np.isfinite(scores).all()


@pytest.mark.parametrize("precision", ["bfloat16", "float16"])
def test_mixed_precision_on_cuda_learns_close_to_float32(precision: str, tmp_path) -> None:
    (tmp_path / "data").mkdir()
    folds = write_synthetic_folds(tmp_path / "data", seed=5, queries=(40, 10, 10), docs=12)
    results = {}
    for name in ("float32", precision):
        config = config_from_dict({
            "seed": 0,
            "data": {"train": str(folds / "train.txt"), "valid": str(folds / "vali.txt"),
                     "test": str(folds / "test.txt")},
            "model": {"kind": "context_aware", "input_dim": 16, "n_blocks": 1, "n_heads": 2, "hidden": 32},
            "loss": {"name": "neural_ndcg"},
            "optimizer": {"lr": 0.01},
            "training": {"epochs": 6, "batch_size": 8, "list_size": 12, "device": "cuda", "precision": name,
                         "grad_clip": 5.0},
            "evaluation": {"metrics": ["ndcg@5", "map"], "select_by": "ndcg@5"},
            "output": {"run_dir": str(tmp_path / name)},
        })
        results[name] = train(config, quiet=True)
    half = results[precision]
    assert all(math.isfinite(row["loss"]) for row in half.history)
    assert all(p.dtype == torch.float32 for p in half.model.parameters())
    assert half.test_metrics["ndcg@5"] > 0.5
    assert abs(half.test_metrics["ndcg@5"] - results["float32"].test_metrics["ndcg@5"]) < 0.05
    state = torch.load(tmp_path / precision / "checkpoint.pt", weights_only=False)
    assert bool(state["scaler"]) == (precision == "float16")  # float16's scale is saved for --resume
