"""`python -m tether_runtime`: one runtime pod (what `tether runtime` runs)."""

import sys

from tether_common.errors import UnsafeSettings

from tether_runtime.server import main

try:
    main()
except UnsafeSettings as err:
    print(f"tether runtime: {err}", file=sys.stderr)
    sys.exit(2)
