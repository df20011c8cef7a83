"""The documentation site: its API pages list every public name, and it builds without a warning."""

import importlib.util
import re
import subprocess
import sys

import pytest
from conftest import REPO

sys.path.insert(0, str(REPO / "docs" / "_ext"))
from api_modules import EXCLUDED, public_modules, public_names

sys.path.pop(0)


def test_public_modules_cover_the_package():
    # Every public top-level module or package is documented (or excluded on purpose), so a new
    # module cannot be left out of the API reference.
    import pkgutil

    import smoothrank

    modules = public_modules()
    for info in pkgutil.iter_modules(smoothrank.__path__):
        name = f"smoothrank.{info.name}"
        if info.name.startswith("_") or name in EXCLUDED:
            continue
        assert name in modules or any(m.startswith(name + ".") for m in modules), name
    assert {"smoothrank.metrics", "smoothrank.losses", "smoothrank.sklearn"} <= set(modules)


def test_public_names_exist():
    for module in public_modules():
        mod = importlib.import_module(module)
        missing = [n for n in public_names(module) if not hasattr(mod, n)]
        assert not missing, (module, missing)


def test_doctests_cover_the_main_api():
    # The floor: at least 40 example lines in the package's docstrings, none skipped.
    lines = [line for path in (REPO / "smoothrank").rglob("*.py")
             for line in path.read_text().splitlines() if line.strip().startswith(">>> ")]
    assert len(lines) >= 40
    assert not [line for line in lines if "+SKIP" in line]


@pytest.mark.slow
@pytest.mark.skipif(not all(importlib.util.find_spec(m) for m in
                            ("sphinx", "numpydoc", "sphinx_gallery", "myst_parser", "pydata_sphinx_theme")),
                    reason="the docs extra is not installed (bash scripts/docs installs it)")
def test_site_builds_without_warnings_and_lists_every_public_name(tmp_path):
    # What `bash scripts/docs` runs, into a temporary folder: a broken page, a docstring that is
    # not valid reStructuredText or a dangling cross-reference fails (-W).
    out = tmp_path / "html"
    result = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
                             "-d", str(tmp_path / "doctrees"), str(REPO / "docs"), str(out)],
                            capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    generated = {p.stem for p in (out / "api" / "generated").glob("*.html")}
    missing = []
    for module in public_modules():
        page = (out / "api" / f"{module}.html").read_text()
        for name in public_names(module):
            if f"{module}.{name}" not in generated or not re.search(rf"\b{re.escape(name)}\b", page):
                missing.append(f"{module}.{name}")
    assert not missing, missing
    assert (out / "auto_examples" / "index.html").is_file()
    assert (out / "getting_started.html").is_file()
