"""Template databases: each test process migrates and seeds one database per configuration (the
agents it loads and every migration they and Tether ship, hashed), and every fresh database is a
`CREATE DATABASE ... TEMPLATE` copy of it (about 0.1 s where migrating and seeding take about 1 s).

A template is this process's own (its name carries the xdist worker, the process id and a random
part: several sessions may share one server) and is dropped when its server's admin DSN is given
up (stores.postgres_admin_dsn). Postgres copies a database only while nobody else is connected to
it, so a template refuses connections once prepared."""

from __future__ import annotations

import asyncio
import hashlib
import os
import secrets
from collections.abc import Mapping
from importlib import resources
from importlib.resources.abc import Traversable

import asyncpg

# (admin DSN, configuration hash) -> template database name, for this process.
_made: dict[tuple[str, str], str] = {}

_COPY_TRIES = 20  # a just-closed connection's backend may take a moment to exit


def _files(folder: Traversable) -> list[tuple[str, bytes]]:
    return sorted((f.name, f.read_bytes()) for f in folder.iterdir() if f.name.endswith(".sql"))


Configs = tuple[Mapping[str, str] | None, ...]


def configuration_hash(configs: Configs) -> str:
    """What `provision.prepare(dsn, config)` for each of `configs` depends on that can change
    within a checkout: the configured agents (names, migration folders) and the text of every
    migration."""
    from tether_runtime.provision import configured_agents
    from tether_runtime.store.migrations import agent_migrations

    digest = hashlib.sha256()
    for name, text in _files(resources.files("tether_runtime.store").joinpath("migrations")):
        digest.update(b"core\0" + name.encode() + b"\0" + text + b"\0")
    for config in configs:
        digest.update(b"prepare\0")
        for agent in configured_agents(config):
            digest.update(f"agent\0{agent.name}\0{agent.migrations}\0".encode())
            for _v, name, sql in agent_migrations(agent.migrations) if agent.migrations else []:
                digest.update(name.encode() + b"\0" + sql.encode() + b"\0")
    return digest.hexdigest()[:12]


def _new_name(prefix: str, key: str = "") -> str:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    return f"{prefix}{key}_{worker}_{os.getpid()}_{secrets.token_hex(3)}"


async def _execute(admin_dsn: str, *statements: str) -> None:
    conn = await asyncpg.connect(admin_dsn)
    try:
        for sql in statements:
            await conn.execute(sql)
    finally:
        await conn.close()


async def _make_template(admin_dsn: str, key: str, configs: Configs) -> str:
    from tether_runtime.provision import prepare

    from tether_testkit.stores import with_database

    name = _new_name("tether_tpl_", key)
    await _execute(admin_dsn, f'CREATE DATABASE "{name}"')
    try:
        for config in configs:
            await prepare(with_database(admin_dsn, name), config)
        # No connection from here on: ours are closed, any straggler is ended.
        await _execute(
            admin_dsn,
            f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false',
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            f" WHERE datname = '{name}' AND pid <> pg_backend_pid()",
        )
    except BaseException:
        await _drop(admin_dsn, name)
        raise
    return name


async def template(admin_dsn: str, configs: Configs) -> str:
    """This process's template for `configs`: a database `provision.prepare` was run on with each
    (None: this process's environment) in turn, made on first use. Coroutines racing to make one
    each keep the first made and drop the others."""
    key = configuration_hash(configs)
    found = _made.get((admin_dsn, key))
    if found is not None:
        return found
    made = await _make_template(admin_dsn, key, configs)
    kept = _made.setdefault((admin_dsn, key), made)
    if kept != made:
        await _drop(admin_dsn, made)
    return kept


async def fresh(admin_dsn: str, configs: Configs) -> str:
    """A new database copied from this process's template for `configs`; its name. A template
    gone with its server (a test's own Postgres, stopped, and another started on its port) is
    made again."""
    name = await template(admin_dsn, configs)
    try:
        return await _copy(admin_dsn, name)
    except asyncpg.InvalidCatalogNameError:
        for k, v in list(_made.items()):
            if v == name:
                del _made[k]
        return await _copy(admin_dsn, await template(admin_dsn, configs))


async def _copy(admin_dsn: str, template_name: str) -> str:
    name = "tether_t_" + secrets.token_hex(6)
    for attempt in range(_COPY_TRIES):
        try:
            await _execute(admin_dsn, f'CREATE DATABASE "{name}" TEMPLATE "{template_name}"')
            return name
        except asyncpg.ObjectInUseError:  # "source database is being accessed by other users"
            if attempt == _COPY_TRIES - 1:
                raise
            await asyncio.sleep(0.1)
    raise AssertionError("unreachable")


async def _drop(admin_dsn: str, name: str) -> None:
    await _execute(admin_dsn, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def drop_all(admin_dsn: str) -> None:
    """Drop every template this process made on `admin_dsn`'s server."""
    for (dsn, key), name in list(_made.items()):
        if dsn == admin_dsn:
            del _made[(dsn, key)]
            await _drop(admin_dsn, name)
