"""Every command block of README.md, run in order, as printed, against a real `tether dev`.

The test lays out the checkout as a new user has it (symlinks to this repository's files, with
its own `.tether/`), holds port 8080 busy, and starts `tether dev` there with the other ports free
and nothing configured: the examples must find the gateway through `.tether/env`, as the README
tells users to. Each shell block then runs in one shell state (variables a block sets are seen by
the next, as in a terminal) and must exit 0; the key outputs of the approval walkthrough are
checked; Python blocks marked runnable run twice (an example that works once and then fails on
its own leftovers is a broken example). Blocks marked `<!-- not-run: … -->` are listed, and
their number is pinned here, so a block cannot quietly stop running.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from readme_blocks import Block, read
from tether_testkit.ports import free_port

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
# The README's own count: change it together with a `<!-- not-run -->` marker, never silently.
EXPECTED_NOT_RUN = 5
SCRUBBED = ("DATABASE_URL", "REDIS_URL", "TETHER_ENV", "TETHER_RUNTIME_TARGET", "TETHER_JWT_SECRET",
            "TETHER_EMBEDDED_STORES", "TETHER_HTTP_ADDR", "TETHER_GRPC_ADDR", "TETHER_AGENTS",
            "TETHER_DEV_DIR", "TETHER_URL", "TETHER_GRPC_TARGET", "TETHER_TOKEN",
            "MAKEFLAGS", "MFLAGS", "MAKELEVEL")  # fmt: skip
BLOCK_TIMEOUT_S = 120


@contextlib.contextmanager
def _hold_busy(port: int) -> Iterator[None]:
    """Keep 127.0.0.1:port busy (if someone else already holds it, it is busy anyway). Bound,
    not listening: an example that still says 8080 is refused at once instead of hanging."""
    sock = socket.socket()
    try:
        with contextlib.suppress(OSError):
            sock.bind(("127.0.0.1", port))
        yield
    finally:
        sock.close()


def _checkout(tmp_path: Path) -> Path:
    """The repository as a user's clone, but with a `.tether/` of its own."""
    view = tmp_path / "tether"
    view.mkdir()
    for entry in REPO.iterdir():
        if entry.name not in (".tether", ".git"):
            (view / entry.name).symlink_to(entry)
    return view


class Shell:
    """One terminal: each block runs in bash with `set -eo pipefail`, in the variables that the
    blocks before it left (exported or not)."""

    def __init__(self, cwd: Path, env: dict[str, str], state: Path) -> None:
        self.cwd, self.env, self.state = cwd, env, state
        baseline = subprocess.run(["bash", "-c", "compgen -v"], env=env, capture_output=True,
                                  text=True, check=True)  # fmt: skip
        self.baseline = " ".join(baseline.stdout.split())

    def run(self, code: str) -> subprocess.CompletedProcess[str]:
        script = f"""set -eo pipefail
[ -f {self.state} ] && source {self.state}
{code}
{{ export -p
   for __v in $(compgen -v); do
     case " {self.baseline} __v " in *" $__v "*) ;; *) declare -p "$__v" ;; esac
   done
}} > {self.state}.new
mv {self.state}.new {self.state}
"""
        return subprocess.run(["bash", "-c", script], cwd=self.cwd, env=self.env, text=True,
                              capture_output=True, timeout=BLOCK_TIMEOUT_S)  # fmt: skip


def _sse(out: str) -> list[dict[str, object]]:
    return [json.loads(line[5:]) for line in out.splitlines() if line.startswith("data:")]


def _text(out: str) -> str:
    return "".join(str(e.get("delta", "")) for e in _sse(out) if e["type"] == "text_delta")


def _types(out: str) -> list[str]:
    return [str(e["type"]) for e in _sse(out)]


def _read_only(out: str) -> None:
    assert _types(out)[0] == "run_started" and _types(out)[-1] == "done", out
    assert "12 recent errors" in _text(out), _text(out)


def _card(out: str) -> None:
    card = json.loads(out)
    assert card["kind"] == "confirm_action" and card["status"] == "pending", card
    assert card["payload"]["target"] == "instance payment-api-2 (payment-api/prod)", card


def _approve(out: str) -> None:
    lines = out.splitlines()
    assert json.loads(lines[0]) == {"replayed": False, "status": "queued"}, out
    assert json.loads(lines[1])["replayed"] is True, out  # the double click: same answer
    events = _sse(out)
    restarts = [
        e for e in events if e["type"] == "tool_finished" and e["tool"] == "restart_instance"
    ]
    assert [e["status"] for e in restarts] == ["success"], events
    assert [e["decision"] for e in events if e["type"] == "interrupt_resolved"] == ["approved"]
    assert _types(out)[-1] == "done", out


def _nothing_left(out: str) -> None:
    assert "no abnormal instance of payment-api" in _text(out), _text(out)
    assert "interrupt" not in _types(out) and _types(out)[-1] == "done", out


def _reset(out: str) -> None:
    assert "demo reset: " in out and "opspilot" in out, out


def _chat(out: str) -> None:
    # the scripted chat's last event, then the newest completed run's status
    assert out.split() == ["done", "completed"], out


def _refused(out: str) -> None:
    assert "You are not allowed" in _text(out), _text(out)
    assert "interrupt" not in _types(out) and _types(out)[-1] == "done", out


def _granted(out: str) -> None:
    assert "granted: billing-bot may instance.restart on payment-api/*" in out, out
    assert out.rstrip().endswith("Restart instance"), out


def _grpc_python(out: str) -> None:
    assert re.search(r"^\[\d+\] done$", out, re.M), out


# A block is found by a line it holds; each must match exactly one block that runs.
CHECKS: dict[str, Callable[[str], None]] = {
    '-d \'{"text": "show me the recent errors of payment-api"}\'': _read_only,
    "jq .run.pendingInterrupt\n": _card,
    "for click in 1 2; do": _approve,
    '"$TETHER_URL/v1/conversations/$conv/runs"\n': _nothing_left,
    "tether seed-demo --reset": _reset,
    '"$TETHER_URL/v1/conversations/$bot_conv/runs"\n': _refused,
    "tether grants add --user billing-bot": _granted,
    "idempotency_key=str(uuid.uuid4())": _grpc_python,
    "tether chat --json --approve --once": _chat,
}


def _check_for(block: Block) -> Callable[[str], None] | None:
    found = [check for key, check in CHECKS.items() if key in block.code]
    assert len(found) <= 1, f"README line {block.line}: several checks match"
    return found[0] if found else None


def test_the_not_run_blocks_are_listed_and_counted() -> None:
    blocks = read(README)
    skipped = [b for b in blocks if b.kind == "shell" and not b.runs]
    listing = "\n".join(f"  README line {b.line}: {b.argument}" for b in skipped)
    print(f"README shell blocks not run ({len(skipped)}):\n{listing}")
    assert all(b.argument for b in skipped), "a not-run marker must say why:\n" + listing
    assert len(skipped) == EXPECTED_NOT_RUN, listing
    # Each check still has its block.
    runnable = [b for b in blocks if b.runs]
    for key in CHECKS:
        assert sum(key in b.code for b in runnable) == 1, f"no single runnable block holds {key!r}"
    for b in blocks:
        if b.marker == "file":
            assert b.kind in ("python", "js", "jsx"), (
                f"README line {b.line}: file: on a {b.lang} block"
            )


# The React pages the browser tests build and drive (test_agui_browser.py, test_aisdk_browser.py):
# the README's "Your frontend" prints each whole.
FRONTEND_PAGES = (
    "tests/integration/copilotkit_page/main.jsx",
    "tests/integration/aisdk_page/main.jsx",
)


def test_the_file_blocks_are_their_files_exactly() -> None:
    printed = {b.argument for b in read(README) if b.marker == "file"}
    assert set(FRONTEND_PAGES) <= printed, set(FRONTEND_PAGES) - printed
    for b in read(README):
        if b.marker == "file":
            path = REPO / b.argument
            assert path.is_file(), f"README line {b.line}: {b.argument} does not exist"
            assert b.code.rstrip("\n") == path.read_text().rstrip("\n"), (
                f"README line {b.line} differs from {b.argument}: the README must print the file"
            )


def _command_for(block: Block, scratch: Path, n: int) -> str:
    if block.kind == "shell":
        return block.code
    if block.marker == "file":
        return ("python " if block.kind == "python" else "node ") + block.argument
    suffix = ".py" if block.kind == "python" else ".mjs"
    path = scratch / f"readme_block_{n}{suffix}"
    path.write_text(block.code)
    return ("python " if block.kind == "python" else "node ") + str(path)


@pytest.mark.slow(seconds=29)
@pytest.mark.timeout(900)
@pytest.mark.process  # starts a process: not in test-fast
def test_every_readme_command_runs_in_order_against_tether_dev(tmp_path: Path) -> None:
    view = _checkout(tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in SCRUBBED}
    env |= {
        "TETHER_GRPC_ADDR": f"127.0.0.1:{free_port()}",
        "MAILER_SMTP_PORT": str(free_port()),
        "MAILER_SINK_HTTP": f"127.0.0.1:{free_port()}",
        "TETHER_DRAIN_S": "5",
    }
    log = tmp_path / "tether-dev.log"
    with _hold_busy(8080), open(log, "w") as out:
        dev = subprocess.Popen(
            [str(view / ".venv" / "bin" / "tether"), "dev"], cwd=view, env=env,
            stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 180
            while not (view / ".tether" / "env").exists():
                assert dev.poll() is None, "tether dev exited:\n" + log.read_text()
                assert time.monotonic() < deadline, "tether dev not ready:\n" + log.read_text()
                time.sleep(0.2)
            time.sleep(0.5)  # the banner is printed right after the file is written
            printed = log.read_text()
            # 8080 was busy: said loudly, and the examples below can only work through the file.
            assert "!! 127.0.0.1:8080 is busy, so the gateway (HTTP) listens on" in printed, printed
            assert "source .tether/env" in printed, printed
            _run_blocks(view, env, tmp_path)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(dev.pid, signal.SIGINT)
            try:
                dev.wait(60)
            finally:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(dev.pid, signal.SIGKILL)
    assert "Tether stopped." in log.read_text()
    assert not (view / ".tether" / "env").exists(), "the env file outlived tether dev"


def _run_blocks(view: Path, env: dict[str, str], tmp_path: Path) -> None:
    shell = Shell(view, env, tmp_path / "shell-state.sh")
    ran = 0
    for n, block in enumerate(read(README)):
        if not block.runs:
            continue
        times = 2 if block.kind != "shell" else 1
        for attempt in range(times):
            result = shell.run(_command_for(block, tmp_path, n))
            where = f"README line {block.line} ({block.lang}, run {attempt + 1})"
            assert result.returncode == 0, (
                f"{where} exited {result.returncode}\n--- block\n{block.code}"
                f"--- stdout\n{result.stdout}--- stderr\n{result.stderr}"
            )
            if check := _check_for(block):
                try:
                    check(result.stdout)
                except AssertionError as err:
                    raise AssertionError(f"{where}: {err}\n--- block\n{block.code}") from err
        ran += 1
    assert ran >= len(CHECKS), ran
