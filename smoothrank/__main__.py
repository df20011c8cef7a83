"""``python -m smoothrank``: the command line (:func:`smoothrank.cli.main`)."""

from smoothrank.cli import main

raise SystemExit(main())
