"""Scoring models: ``f(features (B, L, F), mask (B, L)) -> scores (B, L)``.

Every model scores any list length (training slates and full evaluation lists alike) and
returns 0 at padded positions, so that padding can sit anywhere in a row. Per-item models
(:class:`LinearScorer`, :class:`MLPScorer`) only ever see the real items (they are gathered
with the mask first), so batch normalisation statistics never include padding.

:class:`ContextAwareRanker` is the self-attentive scorer of Pobrotyn et al. ("Context-aware
learning to rank with self-attention", SIGIR eCom 2020) as used in the NeuralNDCG paper
(Pobrotyn & Bialobrzeski 2021, section 5.2): an input fully-connected layer, ``n_blocks``
Transformer encoder blocks whose self-attention runs over the items of one list and ignores
padded items, and a linear output layer with an optional activation (tanh for NeuralNDCG).
It uses no positional encoding: items of a list are a set, so a permutation of the input
permutes the scores and nothing differs between training and inference (PITFALLS 18).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from smoothrank.errors import ConfigError, SmoothrankError
from smoothrank.models.bm25f import BM25F

__all__ = [
    "ACTIVATIONS",
    "BM25F",
    "ContextAwareRanker",
    "LinearScorer",
    "MLPScorer",
    "build_model",
    "reinitialize",
    "score_in_length_groups",
]

ACTIVATIONS: dict[str, type[nn.Module]] = {
    "relu": nn.ReLU,
    "tanh": nn.Tanh,
    "sigmoid": nn.Sigmoid,
    "gelu": nn.GELU,
    "leaky_relu": nn.LeakyReLU,
    "identity": nn.Identity,
}


def _activation(name: str | None, *, argument: str) -> nn.Module:
    if name is None:
        return nn.Identity()
    if name not in ACTIVATIONS:
        raise ConfigError(f"{argument}: unknown activation {name!r}; expected one of {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[name]()


def _check_inputs(features: Tensor, mask: Tensor | None, n_features: int) -> Tensor:
    """Validate shapes and return a boolean mask (all True when ``mask`` is None)."""
    if not isinstance(features, Tensor):
        raise SmoothrankError(f"features: expected a torch.Tensor, got {type(features).__name__}")
    if mask is not None and (not isinstance(mask, Tensor) or mask.dtype != torch.bool):
        # an integer or float 0/1 mask was cast silently, a numpy one failed inside torch
        what = mask.dtype if isinstance(mask, Tensor) else type(mask).__name__
        raise SmoothrankError(f"mask: expected a boolean torch.Tensor (True = real item), got {what}")
    if features.dim() != 3:
        raise ValueError("features: expected shape (batch, list_size, n_features), "
                         f"got {tuple(features.shape)}")
    if features.shape[-1] != n_features:
        raise ValueError(f"features: the model expects {n_features} features, got {features.shape[-1]}")
    if mask is None:
        return torch.ones(features.shape[:2], dtype=torch.bool, device=features.device)
    if mask.shape != features.shape[:2]:
        raise ValueError(f"mask: expected shape {tuple(features.shape[:2])}, got {tuple(mask.shape)}")
    return mask


class _PerItemScorer(nn.Module):
    """Applies ``self.net`` (``(N, F) -> (N, 1)``) to the real items only; padding scores 0."""

    net: nn.Module

    def __init__(self, n_features: int) -> None:
        super().__init__()
        if n_features < 1:
            raise ConfigError(f"n_features: expected a positive count, got {n_features}")
        self.n_features = n_features

    def forward(self, features: Tensor, mask: Tensor | None = None) -> Tensor:
        mask = _check_inputs(features, mask, self.n_features)
        if torch.compiler.is_compiling() and not self.training:
            # torch.export / a compiled eval(): every slot through the net (padding zeroed first,
            # masked after), so that no shape depends on the mask's values. Training keeps the
            # compaction below, compiled or not: dropout draws for the real items only, as in eager.
            n_rows, width = features.shape[:2]
            flat = features.masked_fill(~mask.unsqueeze(-1), 0.0).reshape(n_rows * width, self.n_features)
            return self.net(flat).reshape(n_rows, width).masked_fill(~mask, 0.0)
        # Always through the net, even with no real item, so that the scores keep their graph
        # (backward, and DDP's all-reduce, on an all-padding batch); zeros of the net's output
        # dtype (bfloat16 under autocast). index_put keeps the graph; padded positions stay 0.
        real = self._net(features[mask]).squeeze(-1)
        return real.new_zeros(features.shape[:2]).index_put((mask,), real)

    def _net(self, real: Tensor) -> Tensor:
        """``self.net(real)``; a single item in training normalises with the running statistics of its
        batch norms (one value has no batch variance: torch would raise), as in eval mode."""
        norms = [m for m in self.net.modules() if isinstance(m, nn.BatchNorm1d) and m.training]
        if not norms or real.shape[0] > 1:  # no size test in eval mode: torch.export traces through
            return self.net(real)
        for m in norms:
            m.eval()
        try:
            return self.net(real)
        finally:
            for m in norms:
                m.train()


class LinearScorer(_PerItemScorer):
    """A linear scoring function ``s = w^T x + b``."""

    def __init__(self, n_features: int) -> None:
        super().__init__(n_features)
        self.net = nn.Linear(n_features, 1)


class MLPScorer(_PerItemScorer):
    """A feed-forward network applied to each item independently.

    ``Linear -> [norm] -> activation -> [dropout]`` per hidden layer, then ``Linear(., 1)`` and an
    optional output activation. ``hidden=(3,)`` with ``activation="tanh"`` is the SoftRank paper's
    2-layer net (Taylor et al. 2008, section 4: 3 to 10 hidden units).

    Parameters
    ----------
    n_features : int
    hidden : sequence of int
        Hidden layer widths; empty gives a linear model.
    activation : str
        One of :data:`ACTIVATIONS`.
    dropout : float
        Dropout probability after every hidden layer.
    norm : {"none", "batch", "layer"}
        Normalisation after every hidden linear layer. Batch norm statistics are taken over the
        real items of the batch only.
    output_activation : str or None
    """

    def __init__(self, n_features: int, *, hidden: Sequence[int] = (64,), activation: str = "relu",
                 dropout: float = 0.0, norm: str = "none", output_activation: str | None = None) -> None:
        super().__init__(n_features)
        if norm not in ("none", "batch", "layer"):
            raise ConfigError(f"model.norm: expected 'none', 'batch' or 'layer', got {norm!r}")
        if not 0.0 <= dropout < 1.0:
            raise ConfigError(f"model.dropout: expected a probability in [0, 1), got {dropout}")
        layers: list[nn.Module] = []
        width = n_features
        for size in hidden:
            if size < 1:
                raise ConfigError(f"model.hidden: layer widths must be positive, got {list(hidden)}")
            layers.append(nn.Linear(width, size))
            if norm == "batch":
                layers.append(nn.BatchNorm1d(size))
            elif norm == "layer":
                layers.append(nn.LayerNorm(size))
            layers.append(_activation(activation, argument="model.activation"))
            if dropout > 0:
                layers.append(nn.Dropout(dropout))
            width = size
        layers.append(nn.Linear(width, 1))
        layers.append(_activation(output_activation, argument="model.output_activation"))
        self.net = nn.Sequential(*layers)


class ContextAwareRanker(nn.Module):
    """Self-attentive list scorer (NeuralNDCG paper, section 5.2; Pobrotyn et al. 2020).

    ``h0 = act(W_in x)`` per item, then ``n_blocks`` Transformer encoder blocks (multi-head
    self-attention over the real items of the list, position-wise feed-forward of width
    ``hidden``, residual connections and layer norm), then ``s = out_act(w^T h + b)``.
    The defaults are the paper's Web30K architecture: input layer 96, 2 blocks, 1 head,
    hidden dimension 384; ``output_activation="tanh"`` is what the paper used for NeuralNDCG (it
    used none for the other losses: pass ``None``). These are also the training config's defaults,
    so ``ContextAwareRanker(n)``, ``build_model({"kind": "context_aware"}, n)`` and a config's
    ``model: {kind: context_aware}`` build the same model.
    """

    def __init__(self, n_features: int, *, input_dim: int = 96, n_blocks: int = 2, n_heads: int = 1,
                 hidden: int = 384, dropout: float = 0.1, input_activation: str | None = "relu",
                 output_activation: str | None = "tanh") -> None:
        super().__init__()
        if n_features < 1:
            raise ConfigError(f"n_features: expected a positive count, got {n_features}")
        if input_dim % n_heads != 0:
            raise ConfigError(f"model.input_dim ({input_dim}) must be divisible by model.n_heads ({n_heads})")
        self.n_features = n_features
        self.input = nn.Sequential(nn.Linear(n_features, input_dim),
                                   _activation(input_activation, argument="model.input_activation"))
        block = nn.TransformerEncoderLayer(d_model=input_dim, nhead=n_heads, dim_feedforward=hidden,
                                           dropout=dropout, batch_first=True)
        # Nested-tensor fast path off: identical numerics in train and eval mode.
        self.encoder = nn.TransformerEncoder(block, num_layers=n_blocks, enable_nested_tensor=False)
        self.output = nn.Sequential(nn.Linear(input_dim, 1),
                                    _activation(output_activation, argument="model.output_activation"))

    def forward(self, features: Tensor, mask: Tensor | None = None) -> Tensor:
        mask = _check_inputs(features, mask, self.n_features)
        if features.shape[1] == 0:  # an empty list: nothing to score (the attention cannot reshape it)
            # through the per-item layers all the same: the output dtype (bfloat16 under autocast)
            # and the graph are those of a non-empty list
            return self.output(self.input(features)).squeeze(-1)
        # Padding may hold anything (NaN, inf): a zero attention weight times NaN is still NaN.
        features = features.masked_fill(~mask.unsqueeze(-1), 0.0)
        # A row with no real item would make every attention weight NaN (softmax over -inf);
        # let such rows attend to themselves; their scores are zeroed below anyway.
        attend = mask | ~mask.any(dim=1, keepdim=True)
        hidden = self.encoder(self.input(features), src_key_padding_mask=~attend)
        scores = self.output(hidden).squeeze(-1)
        return scores.masked_fill(~mask, 0.0)


def score_in_length_groups(model: nn.Module, features: Tensor, mask: Tensor, *, groups: int) -> Tensor:
    """``model(features, mask)``, computed on ``groups`` sub-batches of similar list length.

    The lists of the batch are sorted by their extent (last real position + 1) and cut into
    ``groups`` contiguous sub-batches of (nearly) equal size; each is run cropped to its own
    longest extent and the scores are put back in place (0 at padding). A list-wise model
    whose output for a real item does not depend on padding (:class:`ContextAwareRanker`)
    gives the same scores as on the whole batch, at a fraction of the cost when list lengths
    vary: self-attention costs grow with the square of the padded length. Per-item models
    already skip padding and are called once, unchanged (so batch-norm statistics stay
    batch-wide). Gradients flow through the scattered scores as usual.
    """
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        raise ConfigError(f"groups: expected a positive integer, got {groups!r}")
    if (groups == 1 or isinstance(_unwrapped(model), _PerItemScorer) or features.shape[0] < 2
            or mask.shape[1] == 0):
        return model(features, mask)
    width = mask.shape[1]
    positions = torch.arange(1, width + 1, device=mask.device)
    extent = (mask * positions).amax(dim=1)  # last real position + 1 (0 for an empty row)
    order = torch.argsort(extent, stable=True)
    chunks = torch.tensor_split(order, min(groups, order.shape[0]))
    parts = []
    for chunk in chunks:
        crop = max(int(extent[chunk].max()), 1)
        scored = model(features[chunk, :crop], mask[chunk, :crop])
        parts.append(torch.nn.functional.pad(scored, (0, width - crop)))
    # Zeros of the model's output dtype (bfloat16 under autocast), not of the features'.
    scores = parts[0].new_zeros(mask.shape)
    for chunk, part in zip(chunks, parts, strict=True):
        scores = scores.index_put((chunk,), part)
    return scores


def _unwrapped(model: nn.Module) -> nn.Module:
    """The module inside ``torch.compile``'s and DDP's (or DataParallel's) wrappers, for type tests;
    calls still go through the wrapper (DDP's hooks)."""
    while True:
        inner = getattr(model, "_orig_mod", None)
        if isinstance(inner, nn.Module):  # torch.compile's OptimizedModule
            model = inner
        elif isinstance(model, (nn.parallel.DistributedDataParallel, nn.DataParallel)):
            model = model.module
        else:
            return model


def reinitialize(model: nn.Module) -> None:
    """Draw fresh initial weights for every layer of ``model`` (in place, from torch's RNG).

    Used by the SoftRank protocol (Taylor et al. 2008, section 4.5): weights are re-initialised
    after 16 epochs without improvement of the training NDCG@10.
    """
    # Children first, then their parents, as construction does: a MultiheadAttention resets its
    # out_proj's bias to 0 after the Linear drew it.
    for module in reversed(list(model.modules())):
        reset = getattr(module, "reset_parameters", None) or getattr(module, "_reset_parameters", None)
        if callable(reset) and module is not model:
            reset()


def build_model(spec: Any, n_features: int) -> nn.Module:
    """Build a scoring model from a model config (``smoothrank.training.config.ModelConfig`` or dict).

    A dict needs only ``kind`` and the options that differ from the constructor's defaults. The
    spec is read, never modified (PITFALLS 17).
    """
    options = dict(spec) if isinstance(spec, dict) else spec.model_dump()
    kind = options.pop("kind", None)
    builder = _BUILDERS.get(kind)
    if builder is not None:
        unknown = sorted(set(options) - set(inspect.signature(builder).parameters))
        if unknown:
            raise ConfigError(f"model: {kind!r} takes no option(s) {', '.join(unknown)}")
        return builder(n_features, **options)
    raise ConfigError(f"model.kind: unknown model {kind!r}; expected one of {sorted(_BUILDERS)}")


_BUILDERS: dict[str, type[nn.Module]] = {
    "linear": LinearScorer, "mlp": MLPScorer, "context_aware": ContextAwareRanker, "bm25f": BM25F,
}
