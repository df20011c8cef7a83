"""smoothrank: learning to rank by direct optimisation of smoothed rank metrics.

The functional core lives in :mod:`smoothrank.metrics` (exact rank metrics under explicit
conventions), :mod:`smoothrank.gains` (the shared gain/discount vocabulary),
:mod:`smoothrank.sorting` and :mod:`smoothrank.losses` (differentiable surrogates), and
:mod:`smoothrank.data` (LETOR/SVMlight I/O and query lists). Training and the command line are
thin layers on top.
"""

from typing import Any

__version__ = "0.1.0"

__all__ = ["__version__", "load_model"]


def __getattr__(name: str) -> Any:
    # ``smoothrank.load_model`` without importing torch at ``import smoothrank``, nor the training
    # stack (config validation, YAML, progress bars) when loading a model to score with it
    if name == "load_model":
        from smoothrank.training.artifact import load_model

        return load_model
    raise AttributeError(f"module 'smoothrank' has no attribute {name!r}")
