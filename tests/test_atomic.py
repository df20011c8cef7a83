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


def test_an_interrupt_right_after_the_temporary_file_exists_leaves_none(tmp_path, monkeypatch):
    """A worker's KeyboardInterrupt (SIGTERM, Ctrl-C) can land between any two steps: one just after
    the temporary file was created, before the writer's clean-up was armed, used to leave it."""
    target = tmp_path / "c.txt"
    target.write_text("old")
    real_open = os.open

    def open_then_interrupt(name, *args, **kwargs):
        fd = real_open(name, *args, **kwargs)
        if str(name).startswith(str(tmp_path / ".c.txt.")):
            os.close(fd)
            raise KeyboardInterrupt
        return fd

    monkeypatch.setattr(os, "open", open_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        write_text_atomic(target, "new")
    monkeypatch.undo()
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.txt"]


def test_a_temporary_name_taken_by_another_file_is_not_removed(tmp_path, monkeypatch):
    """O_EXCL refuses a temporary name that exists (64 random bits collided): that file is not the
    writer's to remove, and the error names the destination."""
    import secrets

    target = tmp_path / "d.txt"
    (tmp_path / ".d.txt.0000000000000000.tmp").write_text("someone else's")
    monkeypatch.setattr(secrets, "token_hex", lambda n: "0" * (2 * n))
    with pytest.raises(FileExistsError) as info:
        write_text_atomic(target, "new")
    assert str(target) in str(info.value)
    assert (tmp_path / ".d.txt.0000000000000000.tmp").read_text() == "someone else's"
    assert not target.exists()
