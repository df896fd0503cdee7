"""tether-client as a user gets it: its wheel and tether-proto's (the generated code) built with
`uv build`, installed into a fresh virtualenv with nothing else from the repository, driving real
runtime processes.

The programs (pyclient_script.py, docs/examples/client_quickstart.py) run with that virtualenv's
python, copied out of the repository first: the OpsPilot approve flow; a runtime SIGKILLed in
the middle of a stream while a second one on the same database takes over (the iterator carries
on, dense sequences, no duplicate); two tasks approving at once (one restart, the same answer);
each error class from a real call; the sync facade; the README's quickstart exactly as written."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from tether_common.auth import issue_token
from tether_testkit import stores
from tether_testkit.inventory import grant_service
from tether_testkit.processes import Proc, free_port, start_runtime
from tether_testkit.secrets import TEST_SECRET

pytestmark = pytest.mark.timeout(240)

REPO = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).with_name("pyclient_script.py")
QUICKSTART = REPO / "docs" / "examples" / "client_quickstart.py"
USER = "alice"  # granted each service this test makes (grant_service)
COMPLETED = 4  # RUN_STATUS_COMPLETED


# -- the wheel in a bare virtualenv --------------------------------------------------------------


@pytest.fixture(scope="module")
def client_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv holding the tether-client and tether-proto wheels (the generated code
    and the wire's names) and their dependencies, nothing else."""
    tmp = tmp_path_factory.mktemp("pyclient")
    uv = shutil.which("uv")
    assert uv, "uv is not on PATH (make test puts the uv it uses there, .tools/uv included)"
    run = lambda *args: subprocess.run(  # noqa: E731
        [uv, *args], cwd=REPO, check=True, capture_output=True, text=True, timeout=300
    )
    run("build", "--wheel", "libs/proto", "-o", str(tmp / "dist"))
    run("build", "--wheel", "libs/client", "-o", str(tmp / "dist"))
    [proto] = (tmp / "dist").glob("tether_proto-*.whl")
    [wheel] = (tmp / "dist").glob("tether_client-*.whl")
    run("venv", "--python", sys.executable, str(tmp / "venv"))
    python = tmp / "venv" / "bin" / "python"
    run("pip", "install", "--python", str(python), str(proto), str(wheel))
    installed = run("pip", "list", "--python", str(python), "--format", "json").stdout
    names = {p["name"] for p in json.loads(installed)}
    # grpcio's own typing-extensions aside, the two packages, grpcio and protobuf, nothing else.
    assert names - {"typing-extensions"} == {
        "tether-client",
        "tether-proto",
        "grpcio",
        "protobuf",
    }, names
    return python


def _copy(tmp: Path, source: Path) -> Path:
    """Outside the repository: its folder is the script's sys.path[0]."""
    target = tmp / source.name
    shutil.copy(source, target)
    return target


async def run_program(
    python: Path,
    program: Path,
    args: list[str],
    env: dict[str, str],
    on_line: Callable[[str], Awaitable[str | None]] | None = None,
    timeout: float = 150,
) -> tuple[str, dict[str, Any] | None]:
    """Run a program of the bare virtualenv; `on_line` sees each line as it comes and may
    answer with a line for its stdin. Returns (its output, its RESULT document)."""
    proc = await asyncio.create_subprocess_exec(
        str(python), str(program), *args,
        env={"PATH": os.environ["PATH"], **env},
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    assert proc.stdout is not None and proc.stdin is not None
    lines: list[str] = []
    try:
        async with asyncio.timeout(timeout):
            while raw := await proc.stdout.readline():
                line = raw.decode().rstrip("\n")
                lines.append(line)
                if on_line is not None and (reply := await on_line(line)) is not None:
                    proc.stdin.write(reply.encode() + b"\n")
                    await proc.stdin.drain()
            code = await proc.wait()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    out = "\n".join(lines)
    assert code == 0, out
    result = next((ln.split(" ", 1)[1] for ln in lines if ln.startswith("RESULT ")), None)
    return out, json.loads(result) if result else None


# -- a runtime on a database of this module's own --------------------------------------------------


@pytest.fixture(scope="module")
async def pc_dsn(admin_dsn: str) -> AsyncIterator[str]:
    dsn = await stores.create_fresh_database(admin_dsn)
    yield dsn
    await stores.drop_database(admin_dsn, dsn)


@pytest.fixture(scope="module")
def pc_env(base_env: dict[str, str], pc_dsn: str) -> dict[str, str]:
    return {**base_env, "DATABASE_URL": pc_dsn}


@pytest.fixture(scope="module")
def pc_runtime(pc_env: dict[str, str]) -> Iterator[Proc]:
    proc = start_runtime(pc_env, name="runtime-pyclient")
    yield proc
    proc.terminate()


@pytest.fixture
async def pcdb(pc_dsn: str) -> AsyncIterator[asyncpg.Connection]:
    conn = await asyncpg.connect(pc_dsn)
    yield conn
    await conn.close()


def user_token(user: str = USER, **kw: Any) -> str:
    return issue_token(TEST_SECRET, user, **kw)


async def fresh_instance(conn: asyncpg.Connection, name: str) -> str:
    """A service of the test's own with one abnormal instance: its restarts are only ours."""
    svc = f"{name}-{os.urandom(4).hex()}-api".replace("0", "a").replace("1", "b")
    svc = "".join(c if not c.isdigit() else "x" for c in svc)  # the policy's name pattern
    inst = f"{svc}-1"
    await conn.execute("INSERT INTO inv_service (name, env, replicas) VALUES ($1, 'prod', 1)", svc)
    await conn.execute(
        "INSERT INTO inv_instance (id, service, env, status) VALUES ($1, $2, 'prod', 'abnormal')",
        inst,
        svc,
    )
    await grant_service(conn, USER, svc)
    return inst


async def restarts(conn: asyncpg.Connection, instance: str) -> int:
    return int(
        await conn.fetchval("SELECT restart_count FROM inv_instance WHERE id = $1", instance)
    )


def assert_exact(result: dict[str, Any]) -> None:
    """Dense 1..N, each once, ending with the one terminal event `done`."""
    seqs, kinds = result["seqs"], result["kinds"]
    assert seqs == list(range(1, len(seqs) + 1)), seqs
    assert kinds[-1] == "done", kinds
    assert sum(k in ("done", "error", "cancelled") for k in kinds) == 1, kinds


# -- the tests -----------------------------------------------------------------------------------


def test_wheel_holds_the_generated_code_and_nothing_of_the_repository(
    client_python: Path, tmp_path: Path
) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import importlib, tether_client, tether.runtime.v1.runtime_service_pb2_grpc\n"
        "import tether_proto.wire\n"
        "def present(name):\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except ImportError:\n"
        "        return False\n"
        "    return True\n"
        "names = ('tether_common', 'tether_runtime', 'google.rpc.status_pb2', 'opentelemetry')\n"
        "print([n for n in names if present(n)])\n"
        "print(tether_client.__file__)\n"
    )
    out = subprocess.run(
        [str(client_python), str(probe)], capture_output=True, text=True, check=True, timeout=60
    ).stdout.splitlines()
    assert out[0] == "[]", out  # no other Tether package, no googleapis protos, no OpenTelemetry
    assert str(client_python.parents[1]) in out[1], out


async def test_approve_flow_from_a_bare_virtualenv(
    client_python: Path, pc_runtime: Proc, pcdb: asyncpg.Connection, tmp_path: Path
) -> None:
    inst = await fresh_instance(pcdb, "flow")
    env = {"TETHER_TARGET": pc_runtime.addr, "TETHER_TOKEN": user_token(), "TARGET_INSTANCE": inst}
    _, result = await run_program(client_python, _copy(tmp_path, SCRIPT), ["flow"], env)
    assert result is not None
    assert_exact(result)
    kinds = result["kinds"]
    assert kinds.count("interrupt") == 1 and kinds.count("interrupt_resolved") == 1, kinds
    assert kinds.index("interrupt") < kinds.index("interrupt_resolved") < kinds.index("done")
    assert "tool_finished" in kinds[kinds.index("interrupt_resolved") :], kinds
    assert result["status"] == COMPLETED
    assert await restarts(pcdb, inst) == 1


@pytest.mark.slow
async def test_stream_survives_a_sigkilled_runtime_while_another_serves(
    client_python: Path,
    private_env: dict[str, str],
    private_db: asyncpg.Connection,
    procs: list[Proc],
    tmp_path: Path,
) -> None:
    """Runtime A starts and streams a long text run; SIGKILL A after 30 events and start B on
    the same database (the client's target lists both addresses). B takes the run over after A's
    lease; the client's iterator carries on from its last sequence. Then the approve flow runs
    on B, with A still dead."""
    env = {**private_env, "TETHER_SCRIPTED_DELAY_S": "0.01"}
    a_addr, b_addr = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    a = start_runtime(env, name="pyclient-a", addr=a_addr)
    procs.append(a)
    inst = await fresh_instance(private_db, "kill")  # type: ignore[arg-type]

    async def on_line(line: str) -> str | None:
        if line.startswith("PROGRESS streaming"):
            a.kill()
            procs.append(
                await asyncio.to_thread(start_runtime, env, name="pyclient-b", addr=b_addr)
            )
        if line.startswith("PROGRESS interrupt"):
            return "GO"
        return None

    script_env = {
        "TETHER_TARGET": f"ipv4:{a_addr},{b_addr}",
        "TETHER_TOKEN": user_token(),
        "TARGET_INSTANCE": inst,
    }
    _, result = await run_program(
        client_python, _copy(tmp_path, SCRIPT), ["kill"], script_env, on_line
    )
    assert result is not None
    assert not a.alive()
    text_run = result["text_run"]
    assert_exact(text_run)
    assert text_run["reconnects"] >= 1, text_run
    assert text_run["text"] == "".join(f"t{i} " for i in range(300))
    assert_exact(result["approve_run"])
    assert result["approve_run"]["status"] == COMPLETED
    assert await restarts(private_db, inst) == 1  # type: ignore[arg-type]


async def test_double_approve_from_two_tasks_is_one_decision(
    client_python: Path, pc_runtime: Proc, pcdb: asyncpg.Connection, tmp_path: Path
) -> None:
    inst = await fresh_instance(pcdb, "double")
    env = {"TETHER_TARGET": pc_runtime.addr, "TETHER_TOKEN": user_token(), "TARGET_INSTANCE": inst}
    _, result = await run_program(client_python, _copy(tmp_path, SCRIPT), ["double"], env)
    assert result is not None
    first, second = result["answers"]
    assert first == second  # the same answer, byte for byte
    assert_exact(result)
    assert result["kinds"].count("interrupt_resolved") == 1
    assert await restarts(pcdb, inst) == 1


async def test_each_error_class_from_a_real_call(
    client_python: Path, pc_runtime: Proc, pcdb: asyncpg.Connection, tmp_path: Path
) -> None:
    inst = await fresh_instance(pcdb, "errors")
    stuck = socket.socket()  # listens (the kernel completes connections) and never answers
    stuck.bind(("127.0.0.1", 0))
    stuck.listen(8)
    env = {
        "TETHER_TARGET": pc_runtime.addr,
        "TETHER_TOKEN": user_token(),
        "TARGET_INSTANCE": inst,
        "STREAM_TOKEN": user_token(scope="stream", run_id="run_any"),
        "DEAD_TARGET": f"127.0.0.1:{free_port()}",
        "STUCK_TARGET": f"127.0.0.1:{stuck.getsockname()[1]}",
    }
    with stuck:
        _, result = await run_program(client_python, _copy(tmp_path, SCRIPT), ["errors"], env)
    assert result is not None
    expected = {
        "run_not_found": ("RunNotFound", "RUN_NOT_FOUND", "NOT_FOUND"),
        "conversation_not_found": (
            "ConversationNotFound",
            "CONVERSATION_NOT_FOUND",
            "NOT_FOUND",
        ),
        "already_resolved": (
            "InterruptAlreadyResolved",
            "INTERRUPT_ALREADY_RESOLVED",
            "FAILED_PRECONDITION",
        ),
        "interrupt_not_found": ("InterruptNotFound", "INTERRUPT_NOT_FOUND", "NOT_FOUND"),
        "not_cancellable": ("RunNotCancellable", "RUN_NOT_CANCELLABLE", "FAILED_PRECONDITION"),
        "key_reused": ("IdempotencyKeyReused", "IDEMPOTENCY_KEY_REUSED", "ALREADY_EXISTS"),
        "agent_not_found": ("AgentNotFound", "AGENT_NOT_FOUND", "INVALID_ARGUMENT"),
        "invalid_argument": ("InvalidArgument", "INVALID_ARGUMENT", "INVALID_ARGUMENT"),
        "invalid_answer": ("InvalidAnswer", "INVALID_ANSWER", "INVALID_ARGUMENT"),
        "permission_denied": ("PermissionDenied", "PERMISSION_DENIED", "PERMISSION_DENIED"),
        "unauthenticated": ("Unauthenticated", "UNAUTHENTICATED", "UNAUTHENTICATED"),
        "unavailable": ("Unavailable", "UNAVAILABLE", "UNAVAILABLE"),
        "deadline": ("DeadlineExceeded", "DEADLINE_EXCEEDED", "DEADLINE_EXCEEDED"),
    }
    got = {name: tuple(result[name][:3]) for name in expected}
    assert got == expected, result
    assert "no-such-agent" in result["agent_not_found"][3]
    assert result["agents"] == ["opspilot"] and result["default_agent"] == "opspilot"
    assert await restarts(pcdb, inst) == 1  # the approved run only; the cancelled one did nothing


async def test_sync_facade_streams_a_run(
    client_python: Path, pc_runtime: Proc, tmp_path: Path
) -> None:
    env = {"TETHER_TARGET": pc_runtime.addr, "TETHER_TOKEN": user_token()}
    _, result = await run_program(client_python, _copy(tmp_path, SCRIPT), ["sync"], env)
    assert result is not None
    assert_exact(result)
    assert result["text"] == "t0 t1 t2 t3 t4 "
    assert result["status"] == COMPLETED


async def test_quickstart_runs_as_printed(
    client_python: Path, pc_runtime: Proc, pcdb: asyncpg.Connection, tmp_path: Path
) -> None:
    """docs/examples/client_quickstart.py, included verbatim in the README: restart the demo's
    abnormal payment-api-2, approved from the stream."""
    before = await restarts(pcdb, "payment-api-2")
    env = {"TETHER_GRPC_TARGET": pc_runtime.addr, "TETHER_TOKEN": user_token()}
    out, _ = await run_program(client_python, _copy(tmp_path, QUICKSTART), [], env)
    assert "Approving: Restart instance" in out, out
    assert "Done: " in out and "payment-api-2" in out, out
    assert out.rstrip().endswith("[done]"), out
    assert await restarts(pcdb, "payment-api-2") == before + 1
