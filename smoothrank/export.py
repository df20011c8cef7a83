"""Export a trained model for serving: ONNX, TorchScript or ``torch.export``, transforms inside.

The exported graph takes raw features (the fitted training-time transforms -- ``standardize``,
``query_minmax``, ``signed_log1p`` -- are torch ops inside it, see :mod:`smoothrank.models.scoring`)
and has dynamic batch and list sizes:

- inputs ``features`` (float32, batch x list x n_features) and, where the model needs it,
  ``mask`` (bool, batch x list; True = a real document): the Context-Aware Ranker, or a
  ``query_minmax`` transform. :func:`export_model` returns whether it does;
- output ``scores`` (float32, batch x list); 0 at padded slots when a mask is given.

Formats: ``onnx`` (``torch.onnx.export(dynamo=True)``; needs ``pip install 'smoothrank[export]'``),
``torchscript`` (``torch.jit.trace``; ``torch.jit.load``), ``exported-program``
(``torch.export.save`` to a ``.pt2`` file; ``torch.export.load(path).module()``). Files are written
atomically.
"""

from __future__ import annotations

import io
import warnings
from pathlib import Path
from typing import Any

import torch

from smoothrank.errors import SmoothrankError

__all__ = ["FORMATS", "ExportError", "export_model"]

FORMATS = ("onnx", "torchscript", "exported-program")


class ExportError(SmoothrankError):
    """The model cannot be exported in the asked format (e.g. ONNX support not installed)."""


def _example(n_features: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Example inputs of 2 lists of 3 slots (one padded): sizes that no dimension is specialised to."""
    features = torch.linspace(-1.0, 1.0, 2 * 3 * n_features).reshape(2, 3, n_features)
    mask = torch.tensor([[True, True, False], [True, True, True]])
    return features, mask


def _dynamic_shapes(with_mask: bool) -> dict[str, Any]:
    batch, width = torch.export.Dim("batch"), torch.export.Dim("list")
    shapes: dict[str, Any] = {"features": {0: batch, 1: width}}
    if with_mask:
        shapes["mask"] = {0: batch, 1: width}
    return shapes


def _onnx_bytes(module: torch.nn.Module, args: tuple[torch.Tensor, ...], with_mask: bool) -> bytes:
    try:
        import onnx
        import onnxscript  # noqa: F401  (torch.onnx's exporter needs it)
    except ImportError as err:
        raise ExportError(f"--format onnx needs onnx and onnxscript ({err}); "
                          "pip install 'smoothrank[export]'") from None
    names = ["features", "mask"] if with_mask else ["features"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exporter's notes on torchvision ops and axis names
        program = torch.onnx.export(module, args, input_names=names, output_names=["scores"],
                                    dynamic_shapes=_dynamic_shapes(with_mask), dynamo=True, verbose=False)
    if program is None:
        raise ExportError("torch.onnx.export returned no program")
    buffer = io.BytesIO()
    onnx.save(program.model_proto, buffer)
    return buffer.getvalue()


def _torchscript_bytes(module: torch.nn.Module, args: tuple[torch.Tensor, ...]) -> bytes:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's notes on Python booleans, its deprecation
        traced = torch.jit.trace(module, args, check_trace=False)
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch 2.13 deprecates TorchScript
        torch.jit.save(traced, buffer)
    return buffer.getvalue()


def _exported_program_bytes(module: torch.nn.Module, args: tuple[torch.Tensor, ...],
                            with_mask: bool) -> bytes:
    program = torch.export.export(module, args, dynamic_shapes=_dynamic_shapes(with_mask))
    buffer = io.BytesIO()
    torch.export.save(program, buffer)
    return buffer.getvalue()


def export_model(model: Any, out: str | Path, *, format: str = "onnx") -> bool:
    """Write ``model`` with its fitted transforms as one graph of raw features to scores.

    Parameters
    ----------
    model : path, RankingModel or fitted SmoothRanker
        A ``model.pt`` artifact (``smoothrank train``), a loaded one
        (:func:`smoothrank.training.load_model`), or a fitted :class:`smoothrank.sklearn.SmoothRanker`.
    out : path
        The file to write (atomically).
    format : {"onnx", "torchscript", "exported-program"}

    Returns
    -------
    bool
        Whether the graph takes a ``mask`` input besides ``features``.
    """
    from smoothrank._atomic import write_bytes_atomic
    from smoothrank.models.scoring import needs_mask, scoring_module
    from smoothrank.training.artifact import load_model

    if format not in FORMATS:
        raise ExportError(f"format: expected one of {', '.join(FORMATS)}, got {format!r}")
    if format == "exported-program" and Path(out).suffix != ".pt2":
        raise ExportError(f"out: {out}: torch.export.load reads an exported program from a file ending in "
                          ".pt2; name it so")
    if isinstance(model, str | Path):
        model = load_model(model)
    if isinstance(getattr(model, "model", None), torch.nn.Module):  # a loaded RankingModel
        network, n_features, state = model.model, model.n_features, model.transform_state
    elif isinstance(getattr(model, "model_", None), torch.nn.Module):  # a fitted SmoothRanker
        network, n_features, state = model.model_, model.n_features_in_, model.transform_state_
    else:
        raise ExportError(f"model: expected a model file, a loaded model or a fitted SmoothRanker, got "
                          f"{type(model).__name__}")
    with_mask = needs_mask(network, state)
    module = scoring_module(network, state, n_features, with_mask=with_mask)
    features, mask = _example(n_features)
    args = (features, mask) if with_mask else (features,)
    with torch.no_grad():
        if format == "onnx":
            data = _onnx_bytes(module, args, with_mask)
        elif format == "torchscript":
            data = _torchscript_bytes(module, args)
        else:
            data = _exported_program_bytes(module, args, with_mask)
    write_bytes_atomic(out, data)
    return with_mask
