"""Scoring models: shapes, padding anywhere, any list length, permutation equivariance, gradients."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from smoothrank.errors import ConfigError, SmoothrankError
from smoothrank.models import (
    ContextAwareRanker,
    LinearScorer,
    MLPScorer,
    build_model,
    reinitialize,
    score_in_length_groups,
)
from smoothrank.training.config import ContextAwareModelConfig, MLPModelConfig


def _models(n_features: int = 5) -> list[torch.nn.Module]:
    torch.manual_seed(0)
    return [
        LinearScorer(n_features),
        MLPScorer(n_features, hidden=(8, 4), activation="tanh", norm="layer"),
        MLPScorer(n_features, hidden=(6,), norm="batch"),
        ContextAwareRanker(n_features, input_dim=8, n_blocks=2, n_heads=2, hidden=16, dropout=0.0,
                           output_activation="tanh"),
    ]


@pytest.mark.parametrize("index", range(4))
def test_padding_anywhere_does_not_change_real_scores(index):
    model = _models()[index].double().eval()
    torch.manual_seed(1)
    real = torch.randn(1, 4, 5, dtype=torch.float64)
    plain = model(real, torch.ones(1, 4, dtype=torch.bool))
    # Same 4 real items with garbage padding at the front, in the middle and at the end.
    padded = torch.randn(1, 7, 5, dtype=torch.float64) * 1e3
    positions = torch.tensor([1, 2, 4, 6])
    padded[0, positions] = real[0]
    mask = torch.zeros(1, 7, dtype=torch.bool)
    mask[0, positions] = True
    out = model(padded, mask)
    torch.testing.assert_close(out[0, positions], plain[0])
    assert torch.all(out[0, ~mask[0]] == 0)
    # Padding may hold anything: NaN or inf there (a review found the ranker's real scores NaN).
    for junk in (float("nan"), float("inf")):
        padded[0, ~mask[0]] = junk
        torch.testing.assert_close(model(padded, mask)[0, positions], plain[0])


@pytest.mark.parametrize("index", range(4))
def test_any_list_length_and_permutation_equivariance(index):
    model = _models()[index].double().eval()
    empty = torch.randn(2, 0, 5, dtype=torch.float64)
    assert model(empty, torch.zeros(2, 0, dtype=torch.bool)).shape == (2, 0)
    for length in (1, 3, 240, 301):
        x = torch.randn(2, length, 5, dtype=torch.float64)
        scores = model(x, torch.ones(2, length, dtype=torch.bool))
        assert scores.shape == (2, length) and torch.isfinite(scores).all()
        perm = torch.randperm(length)
        torch.testing.assert_close(model(x[:, perm], None), scores[:, perm])


def test_context_aware_uses_the_list_context():
    # Unlike a per-item scorer, an item's score depends on the other items of its list.
    model = ContextAwareRanker(3, input_dim=8, hidden=16, dropout=0.0).double().eval()
    x = torch.randn(1, 4, 3, dtype=torch.float64)
    y = x.clone()
    y[0, 3] += 5.0
    assert not torch.allclose(model(x)[0, :3], model(y)[0, :3])


def test_fully_padded_row_and_gradients_are_finite():
    for model in _models():
        model = model.double().train()
        x = torch.randn(3, 6, 5, dtype=torch.float64, requires_grad=True)
        mask = torch.ones(3, 6, dtype=torch.bool)
        mask[1] = False  # a row with no real item
        mask[2, :5] = False  # a row with one real item
        scores = model(x, mask)
        assert torch.isfinite(scores).all() and torch.all(scores[1] == 0)
        scores.sum().backward()
        assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
        assert torch.all(x.grad[~mask] == 0)


def test_gradcheck_float64():
    torch.manual_seed(0)
    model = ContextAwareRanker(3, input_dim=4, hidden=8, n_heads=2, dropout=0.0).double().eval()
    x = torch.randn(2, 4, 3, dtype=torch.float64, requires_grad=True)
    mask = torch.tensor([[True, False, True, True], [True, True, True, True]])
    assert torch.autograd.gradcheck(lambda inp: model(inp, mask), (x,))
    mlp = MLPScorer(3, hidden=(5,), activation="tanh").double()
    assert torch.autograd.gradcheck(lambda inp: mlp(inp, mask), (x,))


def test_build_model_paper_defaults_and_no_mutation():
    spec = ContextAwareModelConfig(kind="context_aware")
    before = spec.model_dump()
    model = build_model(spec, 46)
    assert spec.model_dump() == before
    assert isinstance(model, ContextAwareRanker)
    layers = model.encoder.layers
    assert len(layers) == 2 and layers[0].self_attn.num_heads == 1
    assert layers[0].linear1.out_features == 384 and model.input[0].out_features == 96
    assert isinstance(model.output[1], torch.nn.Tanh)
    mlp = build_model(MLPModelConfig(kind="mlp", hidden=[3], activation="tanh"), 2)
    assert sum(p.numel() for p in mlp.parameters()) == 2 * 3 + 3 + 3 + 1  # SoftRank's 2-layer net
    assert isinstance(build_model({"kind": "linear"}, 4), LinearScorer)


def test_bad_inputs_name_the_argument():
    model = LinearScorer(5)
    with pytest.raises(ValueError, match="model expects 5 features"):
        model(torch.randn(1, 3, 4))
    with pytest.raises(ValueError, match="mask"):
        model(torch.randn(1, 3, 5), torch.ones(1, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="features"):
        model(torch.randn(3, 5))
    with pytest.raises(ConfigError, match="divisible"):
        ContextAwareRanker(5, input_dim=10, n_heads=3)
    with pytest.raises(ConfigError, match=r"model\.kind"):
        build_model({"kind": "forest"}, 3)


def test_reinitialize_resets_every_parameter():
    torch.manual_seed(0)
    for model in _models():
        with torch.no_grad():
            for p in model.parameters():
                p.add_(10.0)
        perturbed = {name: p.clone() for name, p in model.named_parameters()}
        reinitialize(model)
        for name, p in model.named_parameters():
            assert not torch.equal(p, perturbed[name]), name


def test_reinitialize_draws_as_construction_does():
    # MultiheadAttention zeroes its biases after its out_proj Linear drew one; a parent-first reset
    # (the order of modules()) left out_proj's bias random.
    torch.manual_seed(0)
    model = ContextAwareRanker(5, input_dim=8, n_blocks=2, hidden=16)
    attention = [block.self_attn for block in model.encoder.layers]
    assert all(torch.all(a.out_proj.bias == 0) and torch.all(a.in_proj_bias == 0) for a in attention)
    with torch.no_grad():
        for a in attention:
            a.out_proj.bias.add_(1.0)
    reinitialize(model)
    assert all(torch.all(a.out_proj.bias == 0) and torch.all(a.in_proj_bias == 0) for a in attention)


def test_batch_norm_scores_a_single_item_in_training_with_its_running_statistics():
    # A training batch of one real document (a one-document query alone in the last batch) made
    # BatchNorm1d raise "Expected more than 1 value per channel" from deep inside the trainer.
    torch.manual_seed(0)
    model = MLPScorer(5, hidden=(6,), norm="batch").train()
    x = torch.randn(1, 3, 5)
    mask = torch.tensor([[False, True, False]])
    out = model(x, mask)
    torch.testing.assert_close(out, model.eval()(x, mask))  # the running statistics, as in eval
    assert model.train()(x, mask).requires_grad and model.net[1].training  # left in training mode
    out.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_build_model_from_a_partial_dict_uses_the_defaults():
    model = build_model({"kind": "context_aware", "n_blocks": 1}, 7)
    assert isinstance(model, ContextAwareRanker)
    scores = model(torch.randn(2, 5, 7), torch.ones(2, 5, dtype=torch.bool))
    assert scores.shape == (2, 5)


def test_build_model_leaves_a_dict_spec_untouched():
    """PITFALLS 17: configs mutated in place by model builders (e.g. ``spec.pop("kind")``): the same
    dict builds the same model twice, and is unchanged afterwards."""
    spec = {"kind": "context_aware", "n_blocks": 1, "input_dim": 8, "hidden": 16}
    before = {**spec}
    torch.manual_seed(0)
    first = build_model(spec, 7)
    torch.manual_seed(0)
    second = build_model(spec, 7)
    assert spec == before
    assert all(torch.equal(a, b) for a, b in zip(first.state_dict().values(), second.state_dict().values(),
                                                 strict=True))


def test_build_model_rejects_unknown_options_by_name():
    with pytest.raises(ConfigError, match=r"'mlp' takes no option.*n_blocks"):
        build_model({"kind": "mlp", "n_blocks": 2}, 7)


@pytest.mark.parametrize("groups", [2, 3, 8, 50])
def test_length_groups_give_the_whole_batch_scores_and_gradients(groups):
    torch.manual_seed(2)
    model = ContextAwareRanker(5, input_dim=8, n_blocks=2, n_heads=2, hidden=16, dropout=0.0).double()
    x = torch.randn(9, 12, 5, dtype=torch.float64)
    mask = torch.rand(9, 12) < 0.5  # padding anywhere, lists of every length
    mask[0] = False  # a fully padded row
    mask[1] = True
    mask[2, :] = False
    mask[2, 3] = True  # one real item behind padding
    whole = model(x, mask)
    grouped = score_in_length_groups(model, x, mask, groups=groups)
    torch.testing.assert_close(grouped, whole)
    weights = torch.randn(9, 12, dtype=torch.float64)
    (g_whole,) = torch.autograd.grad((whole * weights).sum(), model.input[0].weight)
    (g_grouped,) = torch.autograd.grad((grouped * weights).sum(), model.input[0].weight)
    torch.testing.assert_close(g_grouped, g_whole)


def test_length_groups_leave_per_item_models_alone():
    model = MLPScorer(5, hidden=(6,), norm="batch")  # batch-norm statistics must stay batch-wide
    x = torch.randn(4, 7, 5)
    mask = torch.rand(4, 7) < 0.6
    mask[:, 0] = True
    torch.testing.assert_close(score_in_length_groups(model, x, mask, groups=4), model(x, mask))
    with pytest.raises(ConfigError, match="groups"):
        score_in_length_groups(model, x, mask, groups=0)


@pytest.mark.parametrize("wrap", ["compile", "data_parallel"])
def test_length_groups_leave_wrapped_per_item_models_alone(wrap):
    # An audit (2026-11-25): a torch.compile (or DDP) wrapper hid the per-item model, so each length
    # group got its own batch-norm statistics and the scores changed by 0.44.
    torch.manual_seed(3)
    inner = MLPScorer(4, hidden=(8,), norm="batch").train()
    model = torch.compile(inner, backend="eager") if wrap == "compile" else nn.DataParallel(inner)
    x = torch.randn(4, 9, 4)
    mask = torch.zeros(4, 9, dtype=torch.bool)
    mask[:2, :2] = True  # two short lists
    mask[2:] = True  # two long ones, their features shifted
    x[2:] += 5.0
    torch.testing.assert_close(score_in_length_groups(model, x, mask, groups=2), inner(x, mask))


def test_length_groups_under_autocast_give_the_models_dtype():
    # An audit (2026-11-25): the buffer took the features' float32 and index_put refused the model's
    # bfloat16 scores under autocast; an empty list gave float32 zeros.
    torch.manual_seed(4)
    model = ContextAwareRanker(4, input_dim=8, hidden=16).eval()
    x = torch.randn(5, 9, 4)
    mask = torch.rand(5, 9) > 0.4
    mask[1] = True
    with torch.autocast("cpu", dtype=torch.bfloat16):
        whole = model(x, mask)
        grouped = score_in_length_groups(model, x, mask, groups=3)
        empty = model(x[:, :0], mask[:, :0])
    assert whole.dtype == grouped.dtype == empty.dtype == torch.bfloat16
    assert empty.shape == (5, 0)
    torch.testing.assert_close(grouped, whole)
    # A batch of empty lists through the grouped path too (a review: amax over a width of 0 raised).
    assert score_in_length_groups(model, x[:, :0], mask[:, :0], groups=2).shape == (5, 0)


@pytest.mark.parametrize("kind", ["linear", "mlp", "context_aware"])
def test_constructor_and_config_defaults_build_the_same_model(kind):
    # build_model with a bare dict uses the constructors' defaults; a config fills in its own. They
    # differed for the ranker's output activation (None against the config's tanh).
    from smoothrank.training.config import config_from_dict

    config = config_from_dict({"data": {"train": "t.txt"}, "model": {"kind": kind}})
    assert repr(build_model({"kind": kind}, 7)) == repr(build_model(config.model, 7))


def test_an_all_padding_batch_keeps_its_graph_and_autocast_gives_its_dtype():
    # Review of 2026-11-24: an all-padding batch gave scores without a graph (backward raised, and under
    # DDP the other process hung up), and bfloat16 autocast crashed in index_put (float32 zeros).
    for model in _models():
        x = torch.randn(2, 4, 5)
        for mode in ("train", "eval"):
            getattr(model, mode)()
            scores = model(x, torch.zeros(2, 4, dtype=torch.bool))
            assert torch.equal(scores, torch.zeros(2, 4)) and scores.requires_grad
            scores.sum().backward()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            scores = model(x, torch.tensor([[True, True, False, True], [False, True, True, True]]))
        assert scores.shape == (2, 4) and torch.isfinite(scores).all()


def test_models_export_with_the_mask_as_an_input():
    # torch.export traced the per-item models' compaction into a shape that depends on the mask's values
    # (GuardOnDataDependentSymNode); traced, they now score every slot and mask afterwards.
    x = torch.randn(2, 4, 5)
    other_x = torch.randn(2, 4, 5)
    other_mask = torch.tensor([[True, False, True, True], [False, False, True, False]])
    other_x[~other_mask] = float("nan")  # padding may hold anything
    for model in _models():
        model.eval()
        exported = torch.export.export(model, (x, torch.ones(2, 4, dtype=torch.bool))).module()
        torch.testing.assert_close(exported(other_x, other_mask), model(other_x, other_mask),
                                   rtol=1e-6, atol=1e-6)


# Dynamo probes the data-dependent index_put of the compaction, and torch reports that probe's error.
@pytest.mark.filterwarnings("ignore:Error detected in IndexPutBackward0")
def test_compiled_training_draws_dropout_as_eager_mode():
    # Scoring every slot while traced also drew dropout for the padding (0.67 apart from eager, review
    # of 2026-11-24): only eval mode, which export needs, scores densely.
    torch.manual_seed(0)
    model = MLPScorer(4, hidden=(8,), dropout=0.5).train()
    x, mask = torch.randn(3, 5, 4), torch.rand(3, 5) > 0.3
    torch.manual_seed(1)
    eager = model(x, mask)
    torch.manual_seed(1)
    compiled = torch.compile(model, backend="aot_eager")(x, mask)
    assert torch.equal(compiled, eager)


@pytest.mark.parametrize("kind", ["linear", "mlp", "context_aware"])
def test_models_refuse_a_mask_or_features_that_are_not_bool_tensors(kind):
    # An audit (2026-11-25): numpy or list inputs failed inside torch (AttributeError), and an integer
    # mask was cast to bool silently.
    import numpy as np

    model = build_model({"kind": kind}, 4)
    x, mask = torch.randn(2, 3, 4), torch.ones(2, 3, dtype=torch.bool)
    for bad in (mask.int(), mask.float(), mask.numpy(), mask.tolist()):
        with pytest.raises(SmoothrankError, match=r"mask: expected a boolean torch\.Tensor"):
            model(x, bad)
    with pytest.raises(SmoothrankError, match=r"features: expected a torch\.Tensor, got ndarray"):
        model(np.zeros((2, 3, 4), np.float32), mask)
    assert model(x, mask).shape == (2, 3)
