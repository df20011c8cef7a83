"""NeuralNDCG and NeuralNDCG-transposed (Pobrotyn & Bialobrzeski, 2021, equations 5 and 6).

Both losses return minus the smoothed NDCG@k of each query (so that they are minimised).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from smoothrank import neural_kernels, sorting
from smoothrank._checks import (
    check_bool,
    check_generator,
    check_nonnegative,
    check_positive,
    check_positive_int,
    within_dtype,
)
from smoothrank.losses import _common as C


def _check_options(temperature: Any, sinkhorn: Any, stochastic: Any, n_samples: Any, beta: Any,
                   max_iter: Any, tol: Any) -> None:
    C.check_positive(temperature, "temperature")
    C.check_positive(beta, "beta")
    check_positive_int(n_samples, "n_samples")
    check_positive_int(max_iter, "max_iter")
    check_nonnegative(tol, "tol")
    check_bool(stochastic, "stochastic")
    check_bool(sinkhorn, "sinkhorn")


def _smoothed_dcg(scores: Tensor, gains: Tensor, mask: Tensor, disc: Tensor, *, temperature: float,
                  sinkhorn: bool, transposed: bool, max_iter: int, tol: float) -> Tensor:
    """Per-query ``d^T scale(P-hat) g`` (eq. 5) or ``g^T scale(P-hat^T) d`` (eq. 6), shape (batch,).

    Computed on the CPU by the compiled kernel of :mod:`smoothrank.neural_kernels` (each query's
    matrices in cache, float64 throughout), elsewhere by :func:`smoothrank.sorting.neural_sort_bilinear`;
    neither keeps a (batch, n, n) tensor alive for the backward pass.
    """
    if neural_kernels.covers(scores):  # the compiled per-query kernel on the CPU
        tau = within_dtype(check_positive(temperature, "temperature"), scores.dtype, divides=True)
        return neural_kernels.neural_dcg_tensor(scores, gains, disc, mask, temperature=tau,
                                                max_iter=max_iter if sinkhorn else 0, tol=tol,
                                                transposed=transposed)
    value, _ = sorting.neural_sort_bilinear(scores, disc, gains, mask=mask, temperature=temperature,
                                            sinkhorn=sinkhorn, transposed=transposed, max_iter=max_iter,
                                            tol=tol)
    return value


def _neural_ndcg(scores: Any, labels: Any, *, mask: Any, reduction: str, temperature: float, k: Any,
                 sinkhorn: bool, stochastic: bool, n_samples: int, beta: float, gain: Any,
                 discount: Any, max_iter: int, tol: float, generator: torch.Generator | int | None,
                 transposed: bool) -> Tensor:
    _check_options(temperature, sinkhorn, stochastic, n_samples, beta, max_iter, tol)
    generator = check_generator(generator)  # checked whether or not it draws: a typo is never ignored
    opts: dict[str, Any] = dict(temperature=float(temperature), sinkhorn=bool(sinkhorn),
                                transposed=transposed, max_iter=int(max_iter), tol=float(tol))

    def smoothed_dcg(t: C.NdcgTerms) -> Tensor:
        scores, g, mask, disc = t.scores, t.gains, t.mask, t.discounts
        if not stochastic:
            return _smoothed_dcg(scores, g, mask, disc, **opts)
        s_count, (b, n) = int(n_samples), scores.shape
        # Sample-major (sample, batch) layout, flattened; masks, gains and discounts are expanded
        # in the same layout so that every sample of query b uses query b's padding.
        perturbed = sorting.gumbel_perturb(scores, n_samples=s_count, beta=float(beta),
                                           generator=generator, mask=mask)

        def expand(x: Tensor) -> Tensor:
            return x.unsqueeze(0).expand(s_count, *x.shape).reshape(s_count * b, n)

        return _smoothed_dcg(perturbed.reshape(s_count * b, n), expand(g), expand(mask), expand(disc),
                             **opts).reshape(s_count, b).mean(0)

    return C.ndcg_loss(scores, labels, mask, reduction=reduction, gain=gain, discount=discount, k=k,
                       smoothed_dcg=smoothed_dcg)


def neural_ndcg(scores: Tensor, labels: Tensor, *, mask: Tensor | None = None, reduction: str = "mean",
                temperature: float = 1.0, k: int | None = None, sinkhorn: bool = True,
                stochastic: bool = False, n_samples: int = 32, beta: float = 1.0, gain: Any = "exp2",
                discount: Any = "log2", max_iter: int = 30, tol: float = 1e-6,
                generator: torch.Generator | int | None = None) -> Tensor:
    r"""Minus NeuralNDCG@k (Pobrotyn & Bialobrzeski 2021, equation 5).

    .. math::
        \mathrm{NeuralNDCG}_k(\tau) = N_k^{-1} \sum_{j=1}^{k} \big(\mathrm{scale}(\hat P) g(y)\big)_j d(j)

    with P-hat the NeuralSort relaxation (:func:`smoothrank.sorting.neural_sort`), scale() Sinkhorn
    scaling (:func:`smoothrank.sorting.sinkhorn_scaling`; skipped with ``sinkhorn=False``), and
    N_k the ideal DCG@k from the hard labels with the same gain and discount.

    Parameters
    ----------
    scores, labels : Tensor (batch, n)
    mask : bool Tensor (batch, n), optional; True = real item, padding anywhere in a row.
    reduction : "mean" | "sum" | "none"; see :mod:`smoothrank.losses._common` (queries without a
        relevant document contribute 0 with zero gradient and are not counted by "mean").
    temperature : tau > 0. As tau -> 0 the loss tends to minus the exact NDCG@k; exactly tied
        scores share their ranks evenly (the mean NDCG of their orders).
    k : cutoff, None = the whole list.
    sinkhorn : scale P-hat to doubly stochastic (max_iter iterations or until every real row and
        column sum is within tol of one; the paper's 30 and 1e-6).
    stochastic : average over ``n_samples`` Plackett-Luce samples: P-hat of ``beta * s + Gumbel``
        (scores read as log-weights; see :func:`smoothrank.sorting.stochastic_neural_sort`),
        drawn with ``generator``. Real item number k of a row (its index among the row's real
        items) gets the same noise wherever the padding sits.
    gain, discount : the :mod:`smoothrank.gains` vocabulary ("exp2" = 2^y - 1, "linear" = y; "log2", ...).

    Examples
    --------
    >>> import torch
    >>> from smoothrank.losses import neural_ndcg
    >>> scores = torch.tensor([[2.0, 1.0, 0.0]], requires_grad=True)
    >>> labels = torch.tensor([[0.0, 1.0, 2.0]])
    >>> loss = neural_ndcg(scores, labels, temperature=1.0)
    >>> round(loss.item(), 4)
    -0.6331
    >>> loss.backward()
    >>> scores.grad.shape
    torch.Size([1, 3])
    """
    return _neural_ndcg(scores, labels, mask=mask, reduction=reduction, temperature=temperature, k=k,
                        sinkhorn=sinkhorn, stochastic=stochastic, n_samples=n_samples, beta=beta,
                        gain=gain, discount=discount, max_iter=max_iter, tol=tol, generator=generator,
                        transposed=False)


def neural_ndcg_transposed(scores: Tensor, labels: Tensor, *, mask: Tensor | None = None,
                           reduction: str = "mean", temperature: float = 1.0, k: int | None = None,
                           sinkhorn: bool = True, stochastic: bool = False, n_samples: int = 32,
                           beta: float = 1.0, gain: Any = "exp2", discount: Any = "log2",
                           max_iter: int = 30, tol: float = 1e-6,
                           generator: torch.Generator | int | None = None) -> Tensor:
    r"""Minus NeuralNDCG-transposed@k (Pobrotyn & Bialobrzeski 2021, equation 6).

    .. math::
        \mathrm{NeuralNDCG}^T_k(\tau) = N_k^{-1} \sum_{i=1}^{n} g(y_i) \big(\mathrm{scale}(\hat P^T) d\big)_i

    summing over documents with the discount vector d zeroed beyond rank k; Sinkhorn scaling is
    applied to P-hat^T (rows of P-hat^T, i.e. documents, normalised first). N_k is the ideal DCG@k
    of the hard labels with the *same* gain (and discount). Without Sinkhorn the value equals
    :func:`neural_ndcg`'s. Options as in :func:`neural_ndcg`.
    """
    return _neural_ndcg(scores, labels, mask=mask, reduction=reduction, temperature=temperature, k=k,
                        sinkhorn=sinkhorn, stochastic=stochastic, n_samples=n_samples, beta=beta,
                        gain=gain, discount=discount, max_iter=max_iter, tol=tol, generator=generator,
                        transposed=True)
