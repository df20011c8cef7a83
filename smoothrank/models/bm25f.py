"""BM25F with learnable parameters (Robertson, Zaragoza & Taylor 2004; Taylor et al. 2008, section 4.2).

For a query with terms ``t`` and a document with fields ``f``::

    tf~(t) = sum_f w_f * tf(t, f) / (1 - b_f + b_f * len_f / avglen_f)
    score  = sum_t idf(t) * tf~(t) / (k1 + tf~(t))

The field weights are applied to the term frequencies *before* the saturation (BM25F), not to
per-field BM25 scores. Every parameter is learned through a constrained parameterisation:
``w_f = softplus(.) >= 0``, ``b_f = sigmoid(.) in [0, 1]``, ``k1 = max(softplus(.), K1_MIN) > 0`` (the
floor keeps ``k1`` positive where softplus underflows, so a term of tf 0 scores 0, not 0/0). Scaling every
``w_f`` and ``k1`` by one factor leaves the score unchanged, so only ``w_f / k1`` and ``b_f`` are
identifiable (the SoftRank paper's "6 parameters on three fields").

:func:`bm25f_scores` is the structured form (tf ``(B, L, T, F)``, ...). :class:`BM25F` is the scoring
model of the package, ``f(features (B, L, n), mask (B, L)) -> (B, L)``: it reads the *packed* layout of
:func:`pack_bm25f`, one row per document, so that BM25F statistics travel through the batchers and
the trainer like any feature matrix. Optionally the BM25F score and ``query_independent`` extra
columns (PageRank, URL length, ...) feed a small net (the paper: 2 layers, 3 hidden units).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from smoothrank.data.bm25f import HEADER, packed_width
from smoothrank.errors import ConfigError, SmoothrankError

__all__ = ["BM25F", "HEADER", "K1_MIN", "bm25f_scores", "pack_bm25f", "packed_width", "unpack_bm25f"]

#: The smallest ``k1`` of :class:`BM25F` (a floor under its softplus, which reaches 0 in float32).
K1_MIN = 1e-6


def pack_bm25f(tf: Tensor, lengths: Tensor, avg_lengths: Tensor, idf: Tensor, term_mask: Tensor | None = None,
               query_independent: Tensor | None = None) -> Tensor:
    """Pack structured BM25F inputs into one feature row per document.

    Parameters
    ----------
    tf : Tensor
        Shape (B, L, T, F): frequency of query term t in field f of document l.
    lengths : Tensor
        Shape (B, L, F): field lengths of each document.
    avg_lengths : Tensor
        Shape (F,): average field lengths of the collection.
    idf : Tensor
        Shape (B, T): idf of each query term.
    term_mask : Tensor, optional
        Shape (B, T), bool: True for real query terms (default: all).
    query_independent : Tensor, optional
        Shape (B, L, Q): extra per-document features.

    Returns
    -------
    Tensor
        Shape (B, L, packed_width(F, T, Q)).
    """
    n_batch, n_docs, n_terms, n_fields = tf.shape
    n_qi = 0 if query_independent is None else query_independent.shape[-1]
    if term_mask is None:
        term_mask = torch.ones(n_batch, n_terms, dtype=torch.bool, device=tf.device)
    per_doc = (n_batch, n_docs)
    header = tf.new_tensor([n_fields, n_terms, n_qi]).expand(*per_doc, HEADER)
    parts = [header, tf.reshape(*per_doc, n_terms * n_fields), lengths.to(tf.dtype),
             avg_lengths.to(tf.dtype).expand(*per_doc, n_fields),
             idf.to(tf.dtype).unsqueeze(1).expand(*per_doc, n_terms),
             term_mask.to(tf.dtype).unsqueeze(1).expand(*per_doc, n_terms)]
    if query_independent is not None:
        parts.append(query_independent.to(tf.dtype))
    return torch.cat(parts, dim=-1)


def unpack_bm25f(features: Tensor) -> dict[str, Tensor]:
    """The inverse of :func:`pack_bm25f` (shapes read from the header).

    Returns a dict with ``tf`` (B, L, T, F), ``lengths`` (B, L, F), ``avg_lengths`` (B, L, F),
    ``idf`` (B, L, T), ``term_mask`` (B, L, T) bool and ``query_independent`` (B, L, Q).
    Raises :class:`SmoothrankError` when the width disagrees with the header.
    """
    if features.dim() != 3:
        raise SmoothrankError("features: expected shape (batch, list_size, n_features), "
                              f"got {tuple(features.shape)}")
    width = features.shape[-1]
    if width < HEADER:
        raise SmoothrankError(f"features: {width} columns cannot hold a packed BM25F row "
                              f"(header of {HEADER})")
    if features.shape[0] * features.shape[1] == 0:
        raise SmoothrankError("features: no row to read the packed BM25F header from")
    n_fields, n_terms, n_qi = (round(v) for v in features[0, 0, :HEADER].tolist())
    if packed_width(n_fields, n_terms, n_qi) != width or min(n_fields, n_terms, n_qi) < 0:
        raise SmoothrankError(f"features: the packed BM25F header says {n_fields} fields, {n_terms} terms, "
                              f"{n_qi} query-independent features ({packed_width(n_fields, n_terms, n_qi)} "
                              f"columns), but rows have {width} columns")
    cuts = [HEADER, n_terms * n_fields, n_fields, n_fields, n_terms, n_terms, n_qi]
    _, tf, lengths, avg, idf, term_mask, qi = torch.split(features, cuts, dim=-1)
    return {"tf": tf.reshape(*features.shape[:2], n_terms, n_fields), "lengths": lengths, "avg_lengths": avg,
            "idf": idf, "term_mask": term_mask > 0.5, "query_independent": qi}


def bm25f_scores(tf: Tensor, lengths: Tensor, avg_lengths: Tensor, idf: Tensor, *, weights: Tensor, b: Tensor,
                 k1: Tensor, term_mask: Tensor | None = None, doc_mask: Tensor | None = None) -> Tensor:
    """BM25F scores, differentiable in every argument.

    Parameters
    ----------
    tf : Tensor
        Shape (B, L, T, F), non-negative.
    lengths : Tensor
        Shape (B, L, F), non-negative field lengths.
    avg_lengths : Tensor
        Positive average field lengths, shape (F,) or broadcastable to (B, L, F).
    idf : Tensor
        Shape (B, T), or (B, L, T) (the packed layout repeats it per document).
    weights, b : Tensor
        Shape (F,): field weights (>= 0) and length normalisation (in [0, 1]).
    k1 : Tensor
        Scalar, > 0.
    term_mask : Tensor, optional
        Shape like ``idf``, bool: False for padded query terms (they contribute 0).
    doc_mask : Tensor, optional
        Shape (B, L), bool: False for padded documents (score 0).

    Returns
    -------
    Tensor
        Shape (B, L).
    """
    norm = 1.0 - b + b * lengths / avg_lengths  # (B, L, F)
    # A field of length 0 holds no term: its tf is 0 and so is its contribution, even where the
    # normaliser is 0 (b = 1); the safe denominator keeps the gradient finite there too.
    safe = torch.where(norm > 0, norm, torch.ones_like(norm))
    pseudo = (weights * tf / safe.unsqueeze(-2)).sum(dim=-1)  # (B, L, T)
    saturated = pseudo / (k1 + pseudo)
    if idf.dim() == 2:
        idf = idf.unsqueeze(1)
    terms = idf * saturated
    if term_mask is not None:
        if term_mask.dim() == 2:
            term_mask = term_mask.unsqueeze(1)
        terms = terms.masked_fill(~term_mask, 0.0)
    scores = terms.sum(dim=-1)
    return scores if doc_mask is None else scores.masked_fill(~doc_mask, 0.0)


def _inverse_softplus(value: float) -> float:
    return value + math.log(-math.expm1(-value)) if value < 20 else value


def _per_field(value: float | Sequence[float] | Mapping[str, float], fields: Sequence[str],
               name: str) -> list[float]:
    if isinstance(value, Mapping):
        unknown = sorted(set(value) - set(fields))
        if unknown:
            raise ConfigError(f"model.{name}: unknown field(s) {unknown}; the fields are {list(fields)}")
        missing = [f for f in fields if f not in value]
        if missing:
            raise ConfigError(f"model.{name}: no value for field(s) {missing}")
        values = [value[f] for f in fields]
    elif _is_number(value):
        values = [value] * len(fields)  # type: ignore[list-item]  # _is_number narrows at run time
    elif isinstance(value, Sequence) and not isinstance(value, str):
        values = list(value)
        if len(values) != len(fields):
            raise ConfigError(f"model.{name}: {len(values)} values for {len(fields)} fields {list(fields)}")
    else:
        raise ConfigError(f"model.{name}: expected a number, one number per field or a mapping field -> "
                          f"number, got {value!r}")
    if not all(_is_number(v) for v in values):
        raise ConfigError(f"model.{name}: expected numbers, got {values!r}")
    return [float(v) for v in values]


def _is_number(value: object) -> bool:
    """A real number that is not a bool (YAML's ``true`` is not a weight)."""
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


class _RawParameters(nn.Module):
    """The unconstrained BM25F parameters; ``reset_parameters`` (called by
    :func:`smoothrank.models.reinitialize`, the SoftRank schedule's re-initialisation) restores
    their initial values."""

    def __init__(self, weights: Tensor, b: Tensor, k1: Tensor, learn: Sequence[str]) -> None:
        super().__init__()
        self.weights = nn.Parameter(weights.clone(), requires_grad="weights" in learn)
        self.b = nn.Parameter(b.clone(), requires_grad="b" in learn)
        self.k1 = nn.Parameter(k1.clone(), requires_grad="k1" in learn)
        self.initial: Tensor
        self.register_buffer("initial", torch.cat([weights, b, k1.reshape(1)]))

    def reset_parameters(self) -> None:
        n = self.weights.numel()
        with torch.no_grad():
            self.weights.copy_(self.initial[:n])
            self.b.copy_(self.initial[n:2 * n])
            self.k1.copy_(self.initial[2 * n])


class BM25F(nn.Module):
    """Learnable BM25F on packed rows (:func:`pack_bm25f`), optionally combined with
    query-independent features in a small net.

    Parameters
    ----------
    n_features : int
        Width of the packed rows; it fixes the number of query terms with ``fields`` and
        ``query_independent`` (:func:`packed_width`).
    fields : sequence of str
        Field names, in the order of the data's ``fields.tsv``.
    k1 : float
        Initial ``k1`` (> 0).
    b : float, sequence or mapping field -> float
        Initial ``b`` per field, in [0, 1] (0 and 1 are moved 1e-6 inside, where the
        parameterisation can reach them).
    weights : float, sequence or mapping field -> float
        Initial field weights (>= 0; 0 is moved to 1e-6).
    query_independent : int
        Number of extra per-document features after the BM25F columns.
    hidden : int or None
        Width of the hidden tanh layer of the net combining the BM25F score with the
        query-independent features (the paper: 3); None with no extra feature: the BM25F score;
        None with extra features: a linear combination.
    learn : sequence of str
        Which parameters are trained, among ``"weights"``, ``"b"``, ``"k1"``.
    """

    def __init__(self, n_features: int, *, fields: Sequence[str], k1: float = 1.2,
                 b: float | Sequence[float] | Mapping[str, float] = 0.75,
                 weights: float | Sequence[float] | Mapping[str, float] = 1.0, query_independent: int = 0,
                 hidden: int | None = None, learn: Sequence[str] = ("weights", "b", "k1")) -> None:
        super().__init__()
        fields = [str(f) for f in fields]
        if not fields or len(set(fields)) != len(fields):
            raise ConfigError(f"model.fields: expected distinct field names, got {fields}")
        if query_independent < 0:
            raise ConfigError(f"model.query_independent: expected a count >= 0, got {query_independent}")
        unknown = sorted(set(learn) - {"weights", "b", "k1"})
        if unknown:
            raise ConfigError(f"model.learn: unknown parameter(s) {unknown}; expected weights, b, k1")
        n_terms, rest = divmod(n_features - HEADER - 2 * len(fields) - query_independent, len(fields) + 2)
        if rest or n_terms < 0:
            raise ConfigError(f"model: {n_features} features are not a packed BM25F layout of {len(fields)} "
                              f"fields and {query_independent} query-independent features")
        b_values, w_values = _per_field(b, fields, "b"), _per_field(weights, fields, "weights")
        if not all(0.0 <= v <= 1.0 for v in b_values):
            raise ConfigError(f"model.b: expected values in [0, 1], got {b_values}")
        if not all(math.isfinite(v) and v >= 0.0 for v in w_values):
            raise ConfigError(f"model.weights: expected finite values >= 0, got {w_values}")
        if not (math.isfinite(k1) and k1 > 0):
            raise ConfigError(f"model.k1: expected a finite value > 0, got {k1}")
        self.fields, self.n_features, self.n_terms = fields, n_features, n_terms
        self.query_independent = query_independent
        eps = 1e-6
        self.raw = _RawParameters(torch.tensor([_inverse_softplus(max(v, eps)) for v in w_values]),
                                  torch.logit(torch.tensor(b_values, dtype=torch.float64), eps=eps).float(),
                                  torch.tensor(_inverse_softplus(k1)), learn)
        self.combine: nn.Module | None = None
        if hidden is not None or query_independent > 0:
            width = 1 + query_independent
            if hidden is None:
                self.combine = nn.Linear(width, 1)
            elif hidden < 1:
                raise ConfigError(f"model.hidden: expected a positive width or null, got {hidden}")
            else:
                self.combine = nn.Sequential(nn.Linear(width, hidden), nn.Tanh(), nn.Linear(hidden, 1))

    @property
    def raw_weights(self) -> Tensor:
        """The unconstrained parameter of the field weights (``weights = softplus(raw_weights)``)."""
        return self.raw.weights

    @property
    def raw_b(self) -> Tensor:
        """The unconstrained parameter of ``b`` (``b = sigmoid(raw_b)``)."""
        return self.raw.b

    @property
    def raw_k1(self) -> Tensor:
        """The unconstrained parameter of ``k1`` (``k1 = softplus(raw_k1)``)."""
        return self.raw.k1

    @property
    def weights(self) -> Tensor:
        """Field weights ``w_f``, shape (F,)."""
        return nn.functional.softplus(self.raw.weights)

    @property
    def b(self) -> Tensor:
        """Length normalisation ``b_f``, shape (F,)."""
        return torch.sigmoid(self.raw.b)

    @property
    def k1(self) -> Tensor:
        """``k1``, a scalar, at least :data:`K1_MIN`."""
        return nn.functional.softplus(self.raw.k1).clamp_min(K1_MIN)

    def parameters_dict(self) -> dict[str, Any]:
        """The BM25F parameters as numbers: ``{"k1": .., "fields": {name: {"weight": .., "b": ..}}}``."""
        weights, b = self.weights.detach().double().tolist(), self.b.detach().double().tolist()
        per_field = zip(self.fields, weights, b, strict=True)
        return {"k1": float(self.k1.detach()),
                "fields": {f: {"weight": w, "b": bf} for f, w, bf in per_field}}

    def bm25f(self, features: Tensor, mask: Tensor | None = None) -> Tensor:
        """The BM25F score of packed rows (B, L, n) -> (B, L), before any combining net."""
        parts = self._unpacked(features, mask)
        if features.shape[0] * features.shape[1] == 0:
            return features.new_zeros(features.shape[:2]) + 0.0 * self.k1
        return bm25f_scores(parts["tf"], parts["lengths"], parts["avg_lengths"], parts["idf"],
                            weights=self.weights, b=self.b, k1=self.k1, term_mask=parts["term_mask"],
                            doc_mask=mask)

    def forward(self, features: Tensor, mask: Tensor | None = None) -> Tensor:
        parts = self._unpacked(features, mask)
        if features.shape[0] * features.shape[1] == 0:  # nothing to score; the graph is kept all the same
            return features.new_zeros(features.shape[:2]) + 0.0 * self.k1
        scores = bm25f_scores(parts["tf"], parts["lengths"], parts["avg_lengths"], parts["idf"],
                              weights=self.weights, b=self.b, k1=self.k1, term_mask=parts["term_mask"])
        if self.combine is not None:
            inputs = torch.cat([scores.unsqueeze(-1), parts["query_independent"]], dim=-1)
            scores = self.combine(inputs).squeeze(-1)
        return scores if mask is None else scores.masked_fill(~mask, 0.0)

    def _unpacked(self, features: Tensor, mask: Tensor | None) -> dict[str, Tensor]:
        if not isinstance(features, Tensor):
            raise SmoothrankError(f"features: expected a torch.Tensor, got {type(features).__name__}")
        if mask is not None and (not isinstance(mask, Tensor) or mask.dtype != torch.bool
                                 or mask.shape != features.shape[:2]):
            raise SmoothrankError(f"mask: expected a boolean tensor of shape {tuple(features.shape[:2])}")
        if features.dim() != 3 or features.shape[-1] != self.n_features:
            raise SmoothrankError(f"features: expected shape (batch, list_size, {self.n_features}) (packed "
                                  f"BM25F rows of {len(self.fields)} fields, {self.n_terms} terms and "
                                  f"{self.query_independent} query-independent features), "
                                  f"got {tuple(features.shape)}")
        real_rows = mask if mask is not None else torch.ones(features.shape[:2], dtype=torch.bool,
                                                             device=features.device)
        # padding may hold anything (NaN): zeroed, and every row gets the model's header
        features = features.masked_fill(~real_rows.unsqueeze(-1), 0.0)
        expected = features.new_tensor([len(self.fields), self.n_terms, self.query_independent])
        wrong = (features[..., :HEADER] != expected).any(dim=-1) & real_rows
        if bool(wrong.any()):
            row, col = torch.nonzero(wrong)[0].tolist()
            got = [round(v) for v in features[row, col, :HEADER].tolist()]
            raise SmoothrankError(f"features: packed rows of {got[0]} fields, {got[1]} terms and {got[2]} "
                                  f"query-independent features, but the model has {len(self.fields)} fields "
                                  f"{self.fields}, {self.n_terms} terms and {self.query_independent} "
                                  "query-independent features")
        features = torch.cat([expected.expand(*features.shape[:2], HEADER), features[..., HEADER:]], dim=-1)
        if features.shape[0] * features.shape[1] == 0:
            return {}
        parts = unpack_bm25f(features)
        real = real_rows.unsqueeze(-1)
        if bool((parts["tf"] < 0).any()) or bool((parts["lengths"] < 0).any()):
            raise SmoothrankError("features: negative term frequency or field length in packed BM25F rows "
                                  "(were the columns transformed? BM25F reads them raw)")
        if bool(((parts["avg_lengths"] <= 0) & real).any()):
            raise SmoothrankError("features: an average field length <= 0 in packed BM25F rows")
        # padded rows: average length 1, so that their (masked) scores and gradients stay finite
        parts["avg_lengths"] = torch.where(real, parts["avg_lengths"], torch.ones_like(parts["avg_lengths"]))
        return parts
