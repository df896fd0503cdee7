"""One script, LangGraph's official Python client (`langgraph-sdk`), run unchanged against any
server of the LangGraph Agent Server API: `langgraph dev`, Tether's gateway at `/langgraph`,
Aegra. Only the URL, the headers and the assistant id differ (langgraph_compare.py passes them).

- `rejoin_mid_stream`: per cut point k, `runs.stream` a run (`stream_resumable`, `on_disconnect:
  continue`), leave after k tokens, `runs.join_stream` with the last event id seen (no
  `stream_mode`: the run's own), read to the end; the tokens over both connections against t0..t{N-1}: lost, duplicated.
- `rejoin_after_end`: one run streamed whole, then `runs.join_stream` from several cut points of
  it (`last_event_id` = the id of event c-1); what the join returns against the stream's tail
  (event and data compared): events lost, events duplicated (or the join's error). Twice: the
  join without `stream_mode` (the run's modes), and `rejoin_after_end_join_names_modes`, the
  join naming the stream's three modes (`stream_mode=[...]`, as the SDK allows).
- `doubled_resume`: run to the interrupt (`runs.wait`), then two `runs.wait` with `command:
  {resume: true}` at once (a double click); lines appended by the write tool = executions.
- `throughput`: runs started on fresh threads by `runs.stream` (to the interrupt), a few at a
  time: runs per second, first event and first token p50/p95 (ms after the request)."""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from langgraph_sdk import get_client
from langgraph_sdk.client import LangGraphClient

from tether_bench.stats import percentile

MODES = ["messages-tuple", "updates", "values"]
_TOKEN = re.compile(r"\bt(\d+) ")
_STREAMING = {"stream_resumable": True, "on_disconnect": "continue"}


def log(msg: str) -> None:
    print(f"[lgcompare {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


async def wait_lines(path: Path, at_least: int, limit_s: float = 15) -> None:
    deadline = time.monotonic() + limit_s
    while lines(path) < at_least:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never reached {at_least} lines")
        await asyncio.sleep(0.01)


def loss(tokens: list[int], n: int) -> tuple[int, int]:
    """(tokens of t0..t{n-1} never received, tokens received more than once)."""
    seen = set(tokens)
    return sum(1 for i in range(n) if i not in seen), len(tokens) - len(seen)


def token_numbers(text: str) -> list[int]:
    """The numbers of the comparison's tokens ("t0 t1 ...") in a piece of streamed text."""
    return [int(m) for m in _TOKEN.findall(text)]


def ask(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


def part_tokens(event: str, data: Any) -> list[int]:
    """Token numbers in one `messages` part of the comparison graph's answer ("t0 t1 ...")."""
    if not event.startswith("messages") or not isinstance(data, list) or not data:
        return []
    chunk = data[0]
    if not isinstance(chunk, dict) or chunk.get("type") not in ("AIMessageChunk", "ai"):
        return []
    return token_numbers(str(chunk.get("content", "")))


def _key(part: Any) -> str:
    return f"{part.event} {json.dumps(part.data, sort_keys=True)}"


class SdkTrials:
    def __init__(
        self,
        name: str,
        url: str,
        assistant: str,
        file: Path,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.name = name
        self.assistant = assistant
        self.file = file
        self.client: LangGraphClient = get_client(url=url, headers=headers or {})

    async def close(self) -> None:
        await self.client.aclose()

    async def _thread(self) -> str:
        return str((await self.client.threads.create())["thread_id"])

    async def rejoin_mid_stream(self, text: str, cut: int) -> list[int]:
        t = await self._thread()
        tokens: list[int] = []
        ids: list[str] = []
        run_id = ""
        stream = self.client.runs.stream(
            t, self.assistant, input=ask(text), stream_mode=MODES, **_STREAMING
        )
        async for part in stream:
            if part.event == "metadata":
                run_id = str(part.data["run_id"])
            if part.id:
                ids.append(part.id)
            tokens.extend(part_tokens(part.event, part.data))
            if len(tokens) >= cut:
                break
        await stream.aclose()  # type: ignore[attr-defined]  # the client goes away mid-stream
        async for part in self.client.runs.join_stream(
            t, run_id, last_event_id=ids[-1] if ids else None
        ):
            tokens.extend(part_tokens(part.event, part.data))
        return tokens

    async def rejoin_after_end(
        self, text: str, cuts: int, join_modes: list[str] | None
    ) -> dict[str, Any]:
        t = await self._thread()
        full = [
            p
            async for p in self.client.runs.stream(
                t, self.assistant, input=ask(text), stream_mode=MODES, **_STREAMING
            )
        ]
        run_id = str(full[0].data["run_id"])
        lost = duplicated = with_loss = with_dups = 0
        errors: list[str] = []
        points = sorted({max(1, len(full) * (i + 1) // (cuts + 1)) for i in range(cuts)})
        for c in points:
            try:
                joined = [
                    p
                    async for p in self.client.runs.join_stream(
                        t, run_id, stream_mode=join_modes, last_event_id=full[c - 1].id
                    )
                ]
            except Exception as e:  # noqa: BLE001 - the server's answer is the measurement
                errors.append(f"cut {c}: {type(e).__name__}: {str(e)[:120]}")
                lost += len(full) - c
                with_loss += 1
                continue
            want, got = Counter(map(_key, full[c:])), Counter(map(_key, joined))
            missing = sum((want - got).values())
            extra = sum((got - want).values())
            lost += missing
            duplicated += extra
            with_loss += missing > 0
            with_dups += extra > 0
        return {
            "events_in_stream": len(full),
            "cut_points": points,
            "cuts_with_loss": with_loss,
            "cuts_with_duplicates": with_dups,
            "events_lost": lost,
            "events_duplicated": duplicated,
            "errors": errors[:3],
        }

    async def doubled_resume(self) -> dict[str, Any]:
        t = await self._thread()
        before = lines(self.file)
        await self.client.runs.wait(t, self.assistant, input=ask("stream 5 deltas"))
        outcomes = await asyncio.gather(
            *(self.client.runs.wait(t, self.assistant, command={"resume": True}) for _ in range(2)),
            return_exceptions=True,
        )
        try:
            await wait_lines(self.file, before + 1, limit_s=10)
        except TimeoutError:
            pass  # no execution at all is a result too
        await asyncio.sleep(2.5)  # a second execution, if any, finishes its write
        return {
            "executions": lines(self.file) - before,
            "outcomes": [_outcome(o) for o in outcomes],
        }

    async def one_run(self, text: str) -> tuple[float, float]:
        """(first event ms, first token ms) of a run streamed on a fresh thread."""
        t = await self._thread()
        start = time.perf_counter()
        first_event = first_token = 0.0
        async for part in self.client.runs.stream(
            t, self.assistant, input=ask(text), stream_mode=MODES
        ):
            now = (time.perf_counter() - start) * 1000
            first_event = first_event or now
            if not first_token and part_tokens(part.event, part.data):
                first_token = now
        return first_event, first_token

    async def throughput(self, runs: int, concurrency: int, text: str) -> dict[str, Any]:
        gate = asyncio.Semaphore(concurrency)

        async def bounded() -> tuple[float, float]:
            async with gate:
                return await self.one_run(text)

        start = time.perf_counter()
        got = await asyncio.gather(*(bounded() for _ in range(runs)))
        wall = time.perf_counter() - start
        events = [e for e, _ in got]
        tokens = [k for _, k in got if k]
        return {
            "runs": runs,
            "concurrency": concurrency,
            "runs_per_s": round(runs / wall, 2),
            "first_event_p50_ms": round(percentile(events, 50), 1),
            "first_event_p95_ms": round(percentile(events, 95), 1),
            "first_token_p50_ms": round(percentile(tokens, 50), 1) if tokens else None,
            "first_token_p95_ms": round(percentile(tokens, 95), 1) if tokens else None,
        }


def _outcome(o: object) -> str:
    if isinstance(o, BaseException):
        status = getattr(getattr(o, "response", None), "status_code", None)
        return f"HTTP {status}" if status else type(o).__name__
    return "ok"


async def run_all(
    side: SdkTrials,
    *,
    cuts: int,
    tokens: int,
    pace_ms: int,
    doubled: int,
    runs: int,
    concurrency: int,
) -> dict[str, Any]:
    text = f"stream {tokens} deltas every {pace_ms} ms"
    doc: dict[str, Any] = {}
    mid = {"trials": cuts, "tokens_per_run": tokens, "trials_with_loss": 0}
    mid.update(trials_with_duplicates=0, tokens_lost=0, tokens_duplicated=0)
    for i in range(cuts):
        cut = max(1, tokens * (i + 1) // (cuts + 1))
        missing, dups = loss(await side.rejoin_mid_stream(text, cut), tokens)
        mid["trials_with_loss"] += missing > 0
        mid["trials_with_duplicates"] += dups > 0
        mid["tokens_lost"] += missing
        mid["tokens_duplicated"] += dups
        log(f"sdk {side.name} mid-stream rejoin {i + 1}/{cuts}: lost {missing}, dup {dups}")
    doc["rejoin_mid_stream"] = mid
    doc["rejoin_after_end"] = await side.rejoin_after_end(text, cuts, None)
    log(f"sdk {side.name} after-end joins: {doc['rejoin_after_end']}")
    doc["rejoin_after_end_join_names_modes"] = await side.rejoin_after_end(text, cuts, MODES)
    log(f"sdk {side.name} after-end joins naming modes: {doc['rejoin_after_end_join_names_modes']}")
    trials = [await side.doubled_resume() for _ in range(doubled)]
    execs = [int(r["executions"]) for r in trials]
    doc["doubled_resume"] = {
        "trials": doubled,
        "executions_per_trial": execs,
        "trials_executed_twice_or_more": sum(1 for x in execs if x > 1),
        "outcomes": sorted({" + ".join(sorted(r["outcomes"])) for r in trials}),
    }
    log(f"sdk {side.name} doubled resume: {doc['doubled_resume']}")
    doc["throughput"] = await side.throughput(runs, concurrency, "stream 5 deltas")
    log(f"sdk {side.name} throughput: {doc['throughput']}")
    return doc
