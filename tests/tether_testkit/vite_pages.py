"""A test's React page (a folder with index.html, main.jsx and vite.config.mjs) built with Vite
into a temporary folder and served on a port of its own, so that its calls to the gateways are
cross-origin, as a real app's are."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from aiohttp import web

from tether_testkit.processes import free_port

ROOT = Path(__file__).resolve().parents[2]
VITE = ROOT / "node_modules" / "vite" / "bin" / "vite.js"


async def run(*args: str, timeout: float) -> str:
    """A command run from the repository's root to its end: its output (it must succeed)."""
    proc = await asyncio.create_subprocess_exec(
        *args, cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        proc.kill()
        out, _ = await proc.communicate()
        raise AssertionError(f"{args[1]} timed out:\n{out.decode()}") from None
    assert proc.returncode == 0, out.decode()
    return out.decode()


@asynccontextmanager
async def served_page(page: Path, out: Path) -> AsyncIterator[tuple[str, str]]:
    """The page built into `out` and served: (its origin, its URL)."""
    node = shutil.which("node")
    assert node, "node is required to build the test's page"
    assert VITE.is_file(), "vite is a dev dependency: run `npm ci` (make setup)"
    config = page / "vite.config.mjs"
    await run(node, str(VITE), "build", "--config", str(config), "--outDir", str(out), timeout=180)
    app = web.Application()

    async def index(request: web.Request) -> web.FileResponse:
        return web.FileResponse(out / "index.html")

    app.router.add_get("/", index)
    app.router.add_static("/assets/", out / "assets")
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    origin = f"http://127.0.0.1:{port}"
    try:
        yield origin, f"{origin}/"
    finally:
        await runner.cleanup()
