"""`TetherClientSync`: the same calls for code without an event loop (scripts, threads).

It runs a `TetherClient` on an event loop of its own in a background thread; every method blocks
until the async one returns and raises the same exceptions. `stream` is a plain iterator with the
same reconnecting behaviour."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterator, Mapping
from types import TracebackType
from typing import Any, TypeVar

from tether.runtime.v1 import events_pb2, resources_pb2
from tether.runtime.v1 import runtime_service_pb2 as pb

from tether_client.client import TetherClient

T = TypeVar("T")


class TetherClientSync:
    """Takes the arguments of `TetherClient`; use as a context manager or call `close()`."""

    def __init__(self, target: str, **kwargs: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="tether-client", daemon=True
        )
        self._thread.start()
        self._client = TetherClient(target, **kwargs)

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def close(self) -> None:
        if self._loop.is_closed():
            return
        self._run(self._client.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def __enter__(self) -> TetherClientSync:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def create_conversation(self, title: str = "", **kw: Any) -> resources_pb2.Conversation:
        return self._run(self._client.create_conversation(title, **kw))

    def get_conversation(self, conversation_id: str, **kw: Any) -> resources_pb2.Conversation:
        return self._run(self._client.get_conversation(conversation_id, **kw))

    def list_conversations(self, **kw: Any) -> pb.ListConversationsResponse:
        return self._run(self._client.list_conversations(**kw))

    def list_messages(self, conversation_id: str, **kw: Any) -> pb.ListMessagesResponse:
        return self._run(self._client.list_messages(conversation_id, **kw))

    def list_runs(self, **kw: Any) -> pb.ListRunsResponse:
        return self._run(self._client.list_runs(**kw))

    def start(self, conversation_id: str, text: str = "", **kw: Any) -> resources_pb2.Run:
        return self._run(self._client.start(conversation_id, text, **kw))

    def get_run(self, run_id: str, **kw: Any) -> resources_pb2.Run:
        return self._run(self._client.get_run(run_id, **kw))

    def stream(self, run_id: str, after: int = 0) -> Iterator[events_pb2.RunEvent]:
        """The run's events up to its terminal event; leaving the loop early closes the stream."""
        events = self._client.stream(run_id, after)
        try:
            while True:
                try:
                    yield self._run(events.__anext__())
                except StopAsyncIteration:
                    return
        finally:
            self._run(events.aclose())

    def resume(
        self, run_id: str, interrupt_id: str, decision: str | int, **kw: Any
    ) -> resources_pb2.Run:
        return self._run(self._client.resume(run_id, interrupt_id, decision, **kw))

    def approve(self, run_id: str, interrupt_id: str, **kw: Any) -> resources_pb2.Run:
        return self._run(self._client.approve(run_id, interrupt_id, **kw))

    def reject(self, run_id: str, interrupt_id: str, **kw: Any) -> resources_pb2.Run:
        return self._run(self._client.reject(run_id, interrupt_id, **kw))

    def answer(
        self,
        run_id: str,
        interrupt_id: str,
        *,
        option: str | None = None,
        fill: Mapping[str, Any] | None = None,
        **kw: Any,
    ) -> resources_pb2.Run:
        return self._run(self._client.answer(run_id, interrupt_id, option=option, fill=fill, **kw))

    def cancel(self, run_id: str, reason: str = "", **kw: Any) -> resources_pb2.Run:
        return self._run(self._client.cancel(run_id, reason, **kw))

    def list_agents(self, **kw: Any) -> pb.ListAgentsResponse:
        return self._run(self._client.list_agents(**kw))
