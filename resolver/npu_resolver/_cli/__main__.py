"""`python -m npu_resolver._cli` runs the CLI."""

from . import main

raise SystemExit(main())
