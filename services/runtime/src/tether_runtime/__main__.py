"""`python -m tether_runtime`: one runtime pod (what `tether runtime` runs)."""

import sys

import tether_common.grpc_io_path  # noqa: F401 - before anything imports grpc
from tether_common.errors import UnsafeSettings

from tether_runtime.server import main

try:
    main()
except UnsafeSettings as err:
    print(f"tether runtime: {err}", file=sys.stderr)
    sys.exit(2)
