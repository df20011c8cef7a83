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
