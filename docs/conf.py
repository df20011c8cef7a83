"""Sphinx configuration of the smoothrank documentation site (built by ``bash scripts/docs``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))
sys.path.insert(0, str(HERE.parent))

import smoothrank  # noqa: E402
from api_modules import public_modules, public_names  # noqa: E402

project = "smoothrank"
author = "smoothrank contributors"
copyright = "2026, smoothrank contributors"  # noqa: A001
release = version = smoothrank.__version__

extensions = [
    "myst_parser",
    "numpydoc",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.intersphinx",
    "sphinx.ext.mathjax",
    "sphinx_gallery.gen_gallery",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_ext", "gallery/README.txt", "figures"]
# The Markdown pages are also read on GitHub: their relative links to code and data files outside
# the site are left as they are (myst reports no cross-reference warning for a link to a file).
myst_enable_extensions = ["dollarmath", "colon_fence"]
myst_heading_anchors = 6

autosummary_generate = True
autosummary_imported_members = True
autodoc_default_options = {"members": False}
autodoc_typehints = "none"   # numpydoc's Parameters sections carry the types
numpydoc_show_class_members = False
numpydoc_validation_checks: set[str] = set()
numpydoc_xref_param_type = False

intersphinx_mapping = {
    "python": ("https://docs.python.org/3", None),
    "torch": ("https://pytorch.org/docs/stable", None),
    "numpy": ("https://numpy.org/doc/stable", None),
}
# Built offline (CI, a fresh clone without network): no inventory fetch.
if os.environ.get("SMOOTHRANK_DOCS_OFFLINE", "1") == "1":
    intersphinx_mapping = {}

sphinx_gallery_conf = {
    "examples_dirs": ["gallery"],
    "gallery_dirs": ["auto_examples"],
    "filename_pattern": r"/plot_",
    "download_all_examples": False,
    "remove_config_comments": True,
    "within_subsection_order": "FileNameSortKey",
}

html_theme = "pydata_sphinx_theme"
html_title = f"smoothrank {release}"
html_theme_options = {"navigation_with_keys": False, "show_toc_level": 2}
html_static_path: list[str] = []


def _write_api_pages() -> None:
    """One page per public module listing every name of its ``__all__`` (autosummary stubs)."""
    out = HERE / "api"
    out.mkdir(exist_ok=True)
    modules = public_modules()
    index = ["API reference", "=============", "",
             "Generated from the docstrings: one page per public module, one entry per name of its",
             "``__all__``.", "", ".. toctree::", "   :maxdepth: 1", ""]
    for name in modules:
        index.append(f"   {name}")
        names = public_names(name)
        lines = [name, "=" * len(name), "", f".. automodule:: {name}", "   :no-members:", "",
                 f".. currentmodule:: {name}", ""]
        if names:
            lines += [".. autosummary::", "   :toctree: generated", "   :nosignatures:", ""]
            lines += [f"   {n}" for n in names]
        text = "\n".join(lines) + "\n"
        page = out / f"{name}.rst"
        if not page.exists() or page.read_text() != text:
            page.write_text(text)
    text = "\n".join(index) + "\n"
    if not (out / "index.rst").exists() or (out / "index.rst").read_text() != text:
        (out / "index.rst").write_text(text)


_write_api_pages()
