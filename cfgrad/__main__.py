"""`python -m cfgrad ...`: the `cfgrad` command line (see cli.py)."""

from .cli import main

raise SystemExit(main())
