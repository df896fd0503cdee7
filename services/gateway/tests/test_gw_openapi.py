"""The OpenAPI document describes exactly the routes the app serves: Tether's own API (the
/langgraph mount serves LangGraph's Agent Server API, whose contract is LangGraph's)."""

from __future__ import annotations

import re
from typing import Any

from aiohttp.test_utils import TestClient
from tether_common.config import Settings
from tether_gateway.app import create_app
from tether_gateway.health import openapi_document


def app_routes(settings: Settings) -> set[tuple[str, str]]:
    app = create_app(settings)
    out = set()
    for route in app.router.routes():
        info = route.resource.canonical if route.resource else ""
        if route.method in ("HEAD", "*") or info.startswith(("/static", "/langgraph/")):
            continue
        out.add((route.method.lower(), info))
    return out


def doc_routes() -> set[tuple[str, str]]:
    paths: Any = openapi_document()["paths"]
    return {(method, path) for path, ops in paths.items() for method in ops}


def test_document_matches_routes(settings: Settings) -> None:
    # The document lists every route a gateway may serve, the dev sign-in included (which only
    # a gateway with TETHER_DEV_LOGIN=1, started by `tether dev`, serves).
    assert doc_routes() == app_routes(settings.model_copy(update={"dev_login": True}))
    assert doc_routes() - app_routes(settings.model_copy(update={"dev_login": False})) == {
        ("post", "/v1/dev/token")
    }


def test_document_is_openapi_31_with_resolvable_refs() -> None:
    doc = openapi_document()
    assert doc["openapi"] == "3.1.0"
    text = str(doc)
    for ref in set(re.findall(r"#/components/(\w+)/(\w+)", text)):
        section: Any = doc["components"]
        assert ref[1] in section[ref[0]], ref


async def test_served_document(client: TestClient[Any, Any]) -> None:
    resp = await client.get("/openapi.json")
    assert resp.status == 200
    assert (await resp.json())["info"]["title"] == "Tether gateway API"
