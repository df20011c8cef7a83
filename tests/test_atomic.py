import os
import stat

import pytest

from smoothrank._atomic import atomic_writer, write_text_atomic


def test_atomic_write_gives_normal_permissions(tmp_path):
    old = os.umask(0o022)
    try:
        write_text_atomic(tmp_path / "a.txt", "hello\n")
    finally:
        os.umask(old)
    assert (tmp_path / "a.txt").read_text() == "hello\n"
    assert stat.S_IMODE((tmp_path / "a.txt").stat().st_mode) == 0o644


def test_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "b.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_writer(target) as handle:
        handle.write(b"half")
        raise RuntimeError("interrupted")
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.txt"]
