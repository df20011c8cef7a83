"""The README's Python example runs as written; the docs' PITFALLS map names tests that exist."""

import re

from conftest import REPO


def test_readme_python_blocks_run():
    text = (REPO / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert blocks, "README has no python example"
    for block in blocks:
        exec(compile(block, "README.md", "exec"), {})


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
