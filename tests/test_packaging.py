"""The package imports only what pyproject.toml declares: every third-party module imported at a
module's top level is a runtime dependency, and one imported inside a function is a runtime
dependency or an optional extra. (scipy was once imported by the experiment runner while it came
only through scikit-learn, which the package did not use.)"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9_.\-]+", requirement).group(0)).lower()


def _declared() -> tuple[set[str], set[str]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = {_name(r) for r in project["dependencies"]}
    extras = project["optional-dependencies"]
    optional = {_name(r) for name, requirements in extras.items() if name != "test" for r in requirements}
    return runtime, optional


#: Modules that only a user of an extra imports (nothing in the package imports them): their
#: module-level imports need only that extra.
EXTRA_MODULES = {"sklearn.py": "sklearn"}


def _third_party_imports() -> dict[str, set[str]]:
    """Top-level module names imported by the package, by where: "top" (module body) or "lazy"."""
    found: dict[str, set[str]] = {"top": set(), "lazy": set()}
    for path in (ROOT / "smoothrank").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        # an extra's own module: its module-level imports are the extra's (checked as optional)
        extra_module = path.relative_to(ROOT / "smoothrank").as_posix() in EXTRA_MODULES
        top_level = set() if extra_module else {id(node) for node in tree.body}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                root = name.split(".")[0]
                if root != "smoothrank" and root not in sys.stdlib_module_names and root != "__future__":
                    found["top" if id(node) in top_level else "lazy"].add(root)
    return found


def _distributions(module: str) -> set[str]:
    return {_name(d) for d in packages_distributions().get(module, [])}


def test_every_import_is_declared() -> None:
    runtime, optional = _declared()
    imports = _third_party_imports()
    assert imports["top"], "no third-party import found: the scan is broken"
    undeclared_top = {m for m in imports["top"] if not _distributions(m) & runtime}
    assert not undeclared_top, f"imported at module level but not a runtime dependency: {undeclared_top}"
    undeclared = {m for m in imports["lazy"] if not _distributions(m) & (runtime | optional)}
    assert not undeclared, f"imported but declared nowhere (dependencies or the extras): {undeclared}"


def test_every_runtime_dependency_is_used() -> None:
    runtime, _ = _declared()
    imports = _third_party_imports()
    used = {d for m in imports["top"] | imports["lazy"] for d in _distributions(m)}
    assert runtime <= used, f"declared but never imported by the package: {runtime - used}"


def _sourced(root: Path, extras: str) -> list[str]:
    """Source a copy of scripts/env.sh in ``root`` (whose .venv/bin/python logs its calls); the calls."""
    import subprocess

    log = root / "calls.log"
    log.write_text("")
    subprocess.run(["bash", "-c", f'source "{root}/scripts/env.sh" "{extras}"'], check=True,
                   capture_output=True)
    return log.read_text().splitlines()


def _checkout(tmp_path: Path) -> Path:
    """A copy of scripts/env.sh and pyproject.toml whose .venv/bin/python only logs its calls."""
    import shutil
    import stat

    root = tmp_path / "a checkout"  # a space in the path, as users have
    (root / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "env.sh", root / "scripts" / "env.sh")
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    python = root / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f'#!/usr/bin/env bash\necho "$*" >> "{root}/calls.log"\n')
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    return root


#: The torch that the set-up scripts install and the test suite runs on (README: "the pinned CPU
#: build of torch 2.13.0"); any other spec may pull a multi-GB CUDA build.
TESTED_TORCH = "2.13.0"


def test_torch_contract_scripts_pin_the_package_gives_a_range(tmp_path) -> None:
    # The package's dependency is a range (an exact pin blocked every other torch in a user's
    # environment), which must admit the tested version; the set-up scripts install exactly the
    # tested version, alone and before the package, and keep it pinned while the package installs.
    from packaging.requirements import Requirement

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (torch_req,) = [Requirement(r) for r in project["dependencies"] if _name(r) == "torch"]
    assert not any(spec.operator in ("==", "===") for spec in torch_req.specifier), torch_req
    assert torch_req.specifier.contains(TESTED_TORCH), torch_req
    assert not torch_req.specifier.contains("2.12.0"), torch_req  # nothing older than what is tested
    pin = f"torch=={TESTED_TORCH}"
    for extras in ("", "test"):
        calls = _sourced(_checkout(tmp_path / (extras or "runtime")), extras)
        installs = [call.split() for call in calls if "pip install" in call]
        package = [i for i, call in enumerate(installs) if "-e" in call]
        # torch alone, first
        assert installs and installs[0][-1] == pin and "-e" not in installs[0], (extras, calls)
        assert len(package) == 1 and package[0] > 0 and pin in installs[package[0]], (extras, calls)
    assert f"torch {TESTED_TORCH}" in (ROOT / "README.md").read_text()


def test_env_script_reinstalls_only_what_is_missing(tmp_path) -> None:
    # The demo ("") after the tests ("test") reinstalled everything: a runtime-only request now takes
    # an environment made with any extras, while a request for extras still installs them.
    root = _checkout(tmp_path)
    stamp = root / ".venv" / ".smoothrank-stamp"
    installs = _sourced(root, "test")
    assert any("torch==" in call for call in installs) and any("[test]" in call for call in installs)
    made = stamp.read_text().strip()
    assert made.endswith("-test")
    assert _sourced(root, "test") == [] and _sourced(root, "") == []  # nothing to do
    assert stamp.read_text().strip() == made
    stamp.write_text(made.removesuffix("test") + "\n")  # an environment made by the demo
    assert any("[test]" in call for call in _sourced(root, "test"))
    stamp.write_text("0000000000000000-test\n")  # pyproject.toml changed since
    assert any("torch==" in call for call in _sourced(root, ""))


def test_import_of_the_losses_does_not_load_numba() -> None:
    # The compiled Rank-Binomial kernels (Numba, with llvmlite and scipy: 1-2 s) are loaded when a
    # SoftRank backend is first resolved, not when the package or its losses are imported.
    import subprocess

    code = ("import sys, smoothrank, smoothrank.losses, smoothrank.softrank\n"
            "loaded = [m for m in ('numba', 'llvmlite') if m in sys.modules]\n"
            "assert not loaded, loaded\n"
            "import torch\n"
            "from smoothrank.softrank.rank_binomial import resolve_backend\n"
            "assert resolve_backend(torch.zeros(1, dtype=torch.float16), 'auto') == 'torch'\n"
            "assert 'numba' not in sys.modules\n"
            "assert resolve_backend(torch.zeros(1), 'auto') == 'numba' and 'numba' in sys.modules\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr


def test_the_gbdt_extra_covers_lgbm_ranker() -> None:
    # boosting.lgbm_ranker_objective exists for lightgbm.LGBMRanker, which imports scikit-learn; the
    # extra once left it out, so the documented path failed after `pip install 'smoothrank[gbdt]'`.
    gbdt = {_name(r) for r in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
            ["optional-dependencies"]["gbdt"]}
    assert {"lightgbm", "scikit-learn"} <= gbdt
    assert "LGBMRanker" in (ROOT / "smoothrank" / "boosting.py").read_text()


def test_extra_modules_are_imported_by_nothing_in_the_package() -> None:
    # smoothrank.sklearn imports scikit-learn at module level: no other module may import it, so that
    # the package works without the extra
    extra = {"smoothrank." + m.removesuffix(".py").replace("/", ".") for m in EXTRA_MODULES}
    for path in (ROOT / "smoothrank").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not extra & set(names), (path, names)
