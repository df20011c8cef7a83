"""The README's Python example runs as written, and the docs' on stand-in data; the docs' commands
parse under the current CLI and name files that exist; the docs' PITFALLS map names tests that exist."""

import re
import shlex

import pytest
from conftest import REPO

from smoothrank.cli import _parse, build_parser

#: The Markdown pages: docs/ and the results' pages under docs/results/.
_PAGES = sorted([*(REPO / "docs").glob("*.md"), *(REPO / "docs" / "results").glob("*.md")])
_DOCS = ["README.md", *(str(p.relative_to(REPO)) for p in _PAGES)]


def test_readme_python_blocks_run():
    text = (REPO / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, "README has no python example"
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {})


def _docs_python_blocks() -> list[tuple[str, int, str]]:
    return [(str(path.relative_to(REPO)), i, block)
            for path in _PAGES
            for i, block in enumerate(re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S))]


#: What the docs' examples take as given (the reader's own data), and the sizes cut for a test run.
_SHRUNK = {"training.epochs=10": "training.epochs=1", "num_boost_round=500": "num_boost_round=3"}


def _docs_example_inputs() -> dict:
    import lightgbm as lgb
    import numpy as np
    import torch

    rng = np.random.default_rng(0)
    query_sizes = [30] * 8
    X, y = rng.normal(size=(240, 3)), rng.integers(0, 3, 240).astype(float)
    mask = torch.tensor([[True] * 5 + [False] * 2, [True] * 7, [True] * 4 + [False] * 3])
    return {"X": X, "y": y, "query_sizes": query_sizes,
            "valid": lgb.Dataset(X, label=y, group=query_sizes),
            "scores": torch.randn(3, 7, requires_grad=True), "labels": torch.randint(0, 3, (3, 7)).float(),
            "mask": mask}


@pytest.mark.parametrize(("doc", "index", "block"), _docs_python_blocks(),
                         ids=[f"{doc}#{i}" for doc, i, _ in _docs_python_blocks()])
def test_docs_python_blocks_run(doc, index, block, tmp_path, monkeypatch):
    # A renamed function or option must not leave a page showing code that fails. The blocks run as
    # written, on small stand-ins for the reader's data and with the sizes of _SHRUNK cut.
    for long, short in _SHRUNK.items():
        block = block.replace(long, short)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "configs").symlink_to(REPO / "configs")
    exec(compile(block, f"{doc} python block {index}", "exec"), _docs_example_inputs())


def test_the_sizes_cut_for_the_docs_examples_are_still_there():
    # Otherwise a reworded example would silently run its full size in the tests.
    text = "".join(block for _, _, block in _docs_python_blocks())
    assert all(long in text for long in _SHRUNK)


def _documented_commands(text: str) -> list[str]:
    """Every ``smoothrank ...`` command of a Markdown text: inline code spans and the lines of code
    blocks (fenced or indented), line continuations joined, comments and ``[optional]`` parts
    dropped. Commands with a ``...`` placeholder are not complete and are left out."""
    text = text.replace("\\\n", " ")
    found = [m.group(1) for m in re.finditer(r"`(smoothrank [^`]+)`", text)]
    fenced = False
    for line in text.splitlines():
        if line.strip().startswith("```"):
            fenced = not fenced
        elif (fenced or line.startswith("    ")) and re.match(r"(\.venv/bin/)?smoothrank ", line.strip()):
            found.append(line.strip())
    commands = []
    for command in found:
        command = re.sub(r"\[[^\]]*\]", "", re.sub(r"\s+#.*$", "", command))
        if "..." not in command:
            commands.append(" ".join(command.split()))
    return commands


@pytest.mark.parametrize("doc", _DOCS)
def test_documented_commands_parse_and_name_shipped_files(doc):
    # A renamed sub-command, flag or shipped config must not leave the docs showing a command that
    # fails at once. Parsing only: nothing is run.
    commands = _documented_commands((REPO / doc).read_text())
    if doc == "README.md":
        assert len(commands) >= 10
    parser = build_parser()
    subcommands = set(next(a for a in parser._actions if a.dest == "command").choices)
    for command in commands:
        argv = shlex.split(command)[1:]
        if len(argv) == 1 and argv[0] in subcommands:
            continue  # the name of a sub-command in prose (`smoothrank train` stops ...)
        try:
            _parse(build_parser(), argv)
        except SystemExit as exit_:
            pytest.fail(f"{doc}: `{command}` does not parse (exit {exit_.code})")
        shipped = [a for a in argv if re.fullmatch(r"(configs|experiments)/\w+\.(yaml|toml)", a)]
        assert all((REPO / a).is_file() for a in shipped), (doc, command)


def test_pitfalls_map_names_tests_that_exist(shared_dir):
    # docs/PITFALLS.md maps every pitfall of ../shared/PITFALLS.md (1..20, 8b, 8c) to tests: none
    # may be left out, and a renamed or deleted test must not leave the map pointing at nothing.
    listed = re.findall(r"^(\d+[a-z]?)\. ", (shared_dir / "PITFALLS.md").read_text(), flags=re.M)
    text = (REPO / "docs" / "PITFALLS.md").read_text()
    rows = re.findall(r"^\| (\d+[a-z]?) \|", text, flags=re.M)
    assert rows == listed and len(rows) == 22
    refs = set(re.findall(r"`(test_\w+\.py)::(test_\w+)`", text))
    assert refs
    missing = [f"{file}::{name}" for file, name in sorted(refs)
               if not re.search(rf"^def {name}\(", (REPO / "tests" / file).read_text(), flags=re.M)]
    assert not missing, missing
