"""Argument types shared by the benchmark scripts: a bad flag is argparse's one-line error."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def size(text: str) -> tuple[int, int]:
    """``BATCHxN``, e.g. ``64x240``."""
    batch, sep, n = text.lower().partition("x")
    try:
        if sep:
            return positive_int(batch), positive_int(n)
    except argparse.ArgumentTypeError:
        pass
    raise argparse.ArgumentTypeError(f"expected BATCHxN with positive integers, e.g. 64x240, got {text!r}")


def sizes(text: str) -> list[tuple[int, int]]:
    """Comma-separated ``BATCHxN`` sizes."""
    return [size(part) for part in text.split(",") if part.strip()]


def size_text(text: str) -> str:
    """A valid ``BATCHxN`` kept as text (scripts that print the sizes as given)."""
    size(text)
    return text.lower()


def set_threads(n: int) -> None:
    """Run PyTorch and Numba on ``n`` threads: SoftNDCG's CPU kernels (``parallel=True``) use Numba's
    thread count, which otherwise defaults to every core whatever PyTorch was told."""
    import torch

    torch.set_num_threads(n)
    try:
        import numba
    except ImportError:  # a runtime without Numba: SoftNDCG falls back to PyTorch
        return
    numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))  # the pool's size caps it
