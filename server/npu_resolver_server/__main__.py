"""`python -m npu_resolver_server [flags]`: the same as `npu-resolve serve [flags]`."""

import sys

from ._cli import main

sys.exit(main())
