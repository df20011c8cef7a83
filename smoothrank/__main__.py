from smoothrank.cli import main

raise SystemExit(main())
