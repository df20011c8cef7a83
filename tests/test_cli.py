import pytest

from smoothrank.cli import CLIError, main


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert "smoothrank" in capsys.readouterr().out


def test_no_command_prints_help(capsys):
    assert main([]) == 2
    assert "usage" in capsys.readouterr().out


def test_user_errors_are_one_line_messages(capsys, monkeypatch):
    import argparse

    import smoothrank.cli as cli

    def fake_parser():
        parser = argparse.ArgumentParser(prog="smoothrank")
        sub = parser.add_subparsers()
        p = sub.add_parser("boom")
        p.add_argument("kind")

        def run(args):
            if args.kind == "cli":
                raise CLIError("bad thing in x.txt line 3")
            open("/nonexistent/file.txt")

        p.set_defaults(func=run)
        return parser

    monkeypatch.setattr(cli, "build_parser", fake_parser)
    assert main(["boom", "cli"]) == 2
    assert capsys.readouterr().err == "smoothrank: error: bad thing in x.txt line 3\n"
    assert main(["boom", "missing"]) == 2
    assert "/nonexistent/file.txt" in capsys.readouterr().err


def test_a_closed_pipe_ends_quietly(tmp_path):
    # `smoothrank ... | head`: the reader closes the pipe early. The command must stop with the
    # closed-pipe status and no traceback, whether a print fails mid-output (the dry run's ~12 kB
    # exceed the 8 kB stdout buffer) or only the final flush does (the short list of losses).
    import subprocess
    import sys

    from conftest import REPO

    spec = str(REPO / "experiments" / "mq2008_refit.yaml")
    for args in (["experiment", spec, "--out", str(tmp_path / "out"), "--dry-run"], ["losses"]):
        proc = subprocess.Popen([sys.executable, "-m", "smoothrank", *args], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        proc.stdout.close()  # the reader is gone before anything was written
        err = proc.stderr.read().decode()
        assert proc.wait(timeout=120) == 141, err
        assert "Traceback" not in err and "BrokenPipe" not in err, err
