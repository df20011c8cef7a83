"""The public modules whose ``__all__`` the API reference documents (docs/conf.py, tests/test_docs.py)."""

from __future__ import annotations

import importlib
import pkgutil

#: Top-level modules that are not library API: the command line (documented by ``--help`` and the
#: guide) and ``python -m smoothrank``.
EXCLUDED = {"smoothrank.cli", "smoothrank.__main__"}


def public_modules() -> list[str]:
    """``smoothrank`` and each public top-level module or package (no leading underscore).

    A package whose ``__init__`` has no ``__all__`` is replaced by its public submodules that have one.
    """
    import smoothrank

    found = ["smoothrank"]
    for info in sorted(pkgutil.iter_modules(smoothrank.__path__), key=lambda m: m.name):
        name = f"smoothrank.{info.name}"
        if info.name.startswith("_") or name in EXCLUDED:
            continue
        module = importlib.import_module(name)
        if hasattr(module, "__all__") or not info.ispkg:
            found.append(name)
            continue
        for sub in sorted(pkgutil.iter_modules(module.__path__), key=lambda m: m.name):
            if not sub.name.startswith("_") and hasattr(importlib.import_module(f"{name}.{sub.name}"), "__all__"):
                found.append(f"{name}.{sub.name}")
    return found


def public_names(module_name: str) -> list[str]:
    """The names of ``module_name.__all__``, or for a module without one, its public classes and functions."""
    import inspect

    module = importlib.import_module(module_name)
    if hasattr(module, "__all__"):
        return list(module.__all__)
    return [name for name, obj in vars(module).items()
            if not name.startswith("_") and (inspect.isclass(obj) or inspect.isfunction(obj))
            and obj.__module__ == module_name]
