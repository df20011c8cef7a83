"""pytest configuration shared by ``tests/`` and the docstring examples under ``smoothrank/``.

``--doctest-modules`` imports every module of the package; a module that needs an optional extra
(``pip install smoothrank[sklearn]`` ...) is left out of collection when that extra is not
installed, so that the rest of the package's examples still run.
"""

from __future__ import annotations

import importlib.util

# module path (relative to this folder) -> the top-level packages it imports at module level
_OPTIONAL = {
    "smoothrank/sklearn.py": ("sklearn",),
}

collect_ignore = [path for path, needs in _OPTIONAL.items()
                  if any(importlib.util.find_spec(name) is None for name in needs)]
