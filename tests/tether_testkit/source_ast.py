"""Parse a Python source file for a test that reads the repository's own code."""

from __future__ import annotations

import ast
import gc
from pathlib import Path


def parse_file(path: Path) -> ast.Module:
    """`ast.parse` of the file, with no garbage collection during it. CPython 3.11's conversion
    of the tree to Python objects is not reentrant (python/cpython#106905): a collection inside
    it that runs a finalizer which formats a traceback (3.11 parses the source line to place
    its carets), such as asyncio's "Future exception was never retrieved", left the outer parse
    failing with "SystemError: AST constructor recursion depth mismatch" (seen once in `make
    test`)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return ast.parse(path.read_text(), str(path))
    finally:
        if enabled:
            gc.enable()
