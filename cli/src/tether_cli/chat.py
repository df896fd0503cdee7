"""`tether chat`: an operator's terminal client over the gateway's HTTP API. Each prompt starts a
run whose events stream as they come; an interrupt is asked inline and answered, and the same
run streams on. A dropped connection (a gateway restart) is resumed after the last event shown,
so nothing is shown twice. Ctrl-C during a run offers to cancel it.

Exit status: 0 every run done; 1 a run failed (or the gateway stayed away); 2 bad usage or a
refused request; 3 a run was left waiting for an answer nobody gave (end of input); 4 a run was
cancelled; 130 Ctrl-C."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import uuid
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import Any, Literal, TextIO

import aiohttp

from tether_cli.chat_answers import NoAnswer, Preset, answer
from tether_cli.chat_render import Renderer, json_line, use_color
from tether_cli.gateway_http import TERMINAL_TYPES, ApiError, GatewayApi, GaveUp

Event = dict[str, Any]
Pause = Literal["terminal", "interrupt", "sigint", "over"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_WAITING, EXIT_CANCELLED, EXIT_SIGINT = 0, 1, 2, 3, 4, 130
CANCEL_REASON = "cancelled from tether chat"


@dataclass
class ChatOptions:
    url: str
    token: str
    agent: str = ""
    conversation: str = ""
    as_json: bool = False
    once: str | None = None
    preset: Preset = field(default_factory=Preset)
    color: bool | None = None
    # Seconds without reaching the gateway before giving up (the run itself carries on).
    patience_s: float = 120.0


class Terminal:
    """Questions and prompts: asked on the terminal (with line editing) when stdin is one, else
    read a line at a time from stdin (a script's answers); in --json mode every question goes
    to stderr, so stdout carries only events."""

    def __init__(self, as_json: bool, stdin: TextIO, out: TextIO, err: TextIO) -> None:
        self.stdin = stdin
        self.tty = stdin.isatty()
        self.qout = err if as_json else out

    def ask(self, question: str) -> str | None:
        """One line (None at the end of input). KeyboardInterrupt passes through."""
        if self.tty and self.qout is sys.stdout:
            try:
                return input(question)
            except EOFError:
                return None
        self.qout.write(question)
        self.qout.flush()
        line = self.stdin.readline()
        if not line:
            if question:
                self.qout.write("\n")
            return None
        if not self.tty:
            self.qout.write("\n")  # a piped answer is not echoed: end the question's line
        return line.rstrip("\r\n")


class Chat:
    def __init__(
        self,
        opts: ChatOptions,
        api: GatewayApi,
        *,
        stdin: TextIO = sys.stdin,
        out: TextIO = sys.stdout,
        err: TextIO = sys.stderr,
    ) -> None:
        self.opts = opts
        self.api = api
        self.out = out
        self.err = err
        self.term = Terminal(opts.as_json, stdin, out, err)
        # Human text goes to stdout; in --json mode stdout is events only, the rest is stderr.
        self.view = Renderer(
            err if opts.as_json else out,
            color=use_color(err if opts.as_json else out, opts.color),
        )
        api.notice = self.view.notice
        self.conversation = opts.conversation
        self.last = 0  # the last sequence shown of the current run

    # -- output --

    def show(self, ev: Event) -> None:
        if self.opts.as_json:
            self.out.write(json_line(ev) + "\n")
            self.out.flush()
        else:
            self.view.event(ev)
        if ev.get("type") == "interrupt" and self.opts.as_json:
            self.view.card(ev)  # the question that follows needs its card, on stderr

    def say(self, text: str) -> None:
        self.view.line(self.view.style(f"  {text}", "yellow"))

    # -- the loop --

    async def run(self) -> int:
        if not self.opts.as_json:
            await self._greet()
        code = EXIT_OK
        if self.conversation:
            code = await self._attach_waiting()
            if code == EXIT_WAITING:
                return code
        for text in self._prompts():
            code = await self.turn(text)
            if code == EXIT_WAITING:
                break
        return code

    async def _greet(self) -> None:
        try:
            agents = await self.api.list_agents()
            self.view.agent = self.opts.agent or str(agents.get("defaultAgent") or "agent")
        except ApiError:
            self.view.agent = self.opts.agent or "agent"
        if self.term.tty:
            self.view.line(
                self.view.style(
                    f"tether chat with {self.view.agent} at {self.api.url}: Ctrl-D leaves, "
                    "Ctrl-C during a run offers to cancel it",
                    "dim",
                )
            )

    def _prompts(self) -> Any:
        if self.opts.once is not None:
            yield self.opts.once
            return
        while True:
            try:
                line = self.term.ask("you> " if self.term.tty else "")
            except KeyboardInterrupt:
                self.view.line()
                return
            if line is None:
                if self.term.tty:
                    self.view.line()
                return
            if line.strip():
                yield line.strip()

    async def _ensure_conversation(self, first_text: str) -> str:
        if not self.conversation:
            conv = await self.api.create_conversation(title=first_text[:80])
            self.conversation = str(conv["id"])
            if not self.opts.as_json:
                self.view.line(
                    self.view.style(
                        f"  (conversation {self.conversation}: continue it with "
                        f"--conversation {self.conversation})",
                        "dim",
                    )
                )
        return self.conversation

    async def turn(self, text: str) -> int:
        """One prompt: start its run (idempotent across retries) and see it to its end."""
        conv = await self._ensure_conversation(text)
        key = f"chat-{uuid.uuid4().hex}"
        run_id, opened = await self.api.start_run_stream(conv, text, key, self.opts.agent)
        self.last = 0
        return await self.see_through(run_id, opened)

    async def _attach_waiting(self) -> int:
        """A conversation given with --conversation may hold runs still going or waiting for an
        answer: each is shown from its start and seen through before the first prompt."""
        await self.api.get_conversation(self.conversation)  # 404 now, not at the first prompt
        runs, _ = await self.api.list_runs(conversation_id=self.conversation, page_size=20)
        code = EXIT_OK
        for run in reversed(
            [r for r in runs if r["status"] in ("waiting", "queued", "running", "interrupted")]
        ):
            self.view.notice(f"run {run['id']} is {run['status']}: showing it from its start")
            self.last = 0
            pending = (run.get("pendingInterrupt") or {}).get("id")
            code = await self.see_through(str(run["id"]), None, pending_id=pending)
            if code == EXIT_WAITING:
                return code
        return code

    async def see_through(
        self, run_id: str, opened: aiohttp.ClientResponse | None, *, pending_id: str | None = None
    ) -> int:
        """Follow `run_id` to its end, answering its interrupts and offering to cancel it on
        Ctrl-C. `pending_id`: when replaying a run from its start, only this interrupt is
        still open (earlier ones in the log were answered)."""
        preset = self.opts.preset
        while True:
            try:
                pause, ev = await self._follow(run_id, opened, pending_id)
            except GaveUp as err:
                self.say(f"{err}; the run carries on: tether runs events {run_id} --follow")
                return EXIT_FAILED
            opened, pending_id = None, None
            if pause == "over":
                return EXIT_OK
            if pause == "terminal":
                assert ev is not None
                return {"done": EXIT_OK, "cancelled": EXIT_CANCELLED}.get(
                    str(ev.get("type")), EXIT_FAILED
                )
            if pause == "sigint":
                code = await self._offer_cancel(run_id)
                if code is not None:
                    return code
                continue
            assert ev is not None
            try:
                preset = await self._answer(run_id, ev, preset)
            except NoAnswer:
                self.say(
                    f"run {run_id} waits for an answer; continue it with: tether chat "
                    f"--conversation {self.conversation}"
                )
                return EXIT_WAITING
            except KeyboardInterrupt:
                code = await self._offer_cancel(run_id)
                if code is not None:
                    return code

    async def _follow(
        self, run_id: str, opened: aiohttp.ClientResponse | None, pending_id: str | None
    ) -> tuple[Pause, Event | None]:
        """Show events until the run ends, asks something (the stream is closed then: answering
        may take a while) or Ctrl-C is pressed."""
        loop = asyncio.get_running_loop()
        task = asyncio.create_task(self._consume(run_id, opened, pending_id))
        pressed = False

        def on_sigint() -> None:
            nonlocal pressed
            pressed = True
            task.cancel()

        loop.add_signal_handler(signal.SIGINT, on_sigint)
        try:
            return await task
        except asyncio.CancelledError:
            if not pressed:
                raise
            return "sigint", None
        finally:
            loop.remove_signal_handler(signal.SIGINT)
            if opened is not None and not opened.closed:
                opened.close()

    async def _consume(
        self, run_id: str, opened: aiohttp.ClientResponse | None, pending_id: str | None
    ) -> tuple[Pause, Event | None]:
        events: AsyncGenerator[Event, None] = self.api.follow(run_id, self.last, opened)
        async with contextlib.aclosing(events):
            async for ev in events:
                kind = ev.get("type")
                if kind == "reset":
                    self.last = int((ev.get("run") or {}).get("lastSequence") or self.last)
                    continue
                self.last = max(self.last, int(ev.get("sequence") or 0))
                self.show(ev)
                if kind == "interrupt" and (pending_id is None or ev["interruptId"] == pending_id):
                    return "interrupt", ev
                if kind in TERMINAL_TYPES:
                    return "terminal", ev
        return "over", None

    async def _answer(self, run_id: str, ev: Event, preset: Preset) -> Preset:
        """Answer the interrupt (asking again after a refused answer); returns the presets for
        the rest of the run (a preset the gateway refused is not offered again)."""
        while True:
            body = answer(ev, preset, self.term.ask, self.say)
            try:
                await self.api.resume(run_id, body)
                return preset
            except ApiError as err:
                if err.code == "INVALID_ANSWER" or err.status == 400:
                    self.say(f"not accepted: {err.message}")
                    preset = Preset(confirm=preset.confirm, unknown=preset.unknown)
                    continue
                if err.code in ("INTERRUPT_ALREADY_RESOLVED", "INTERRUPT_EXPIRED"):
                    self.say(f"{err.message}; following the run")
                    return preset
                raise

    async def _offer_cancel(self, run_id: str) -> int | None:
        """Ctrl-C: on a terminal, ask; from a script, cancel. None: carry on following."""
        self.view.end_text()
        if self.term.tty:
            try:
                got = self.term.ask(f"cancel run {run_id}? [y/N] ")
            except KeyboardInterrupt:
                got = None
            if got is None:
                self.say(f"left run {run_id} going: tether runs events {run_id} --follow")
                return EXIT_SIGINT
            if got.strip().lower() not in ("y", "yes"):
                return None
        status, _ = await self.api.cancel_run(run_id, CANCEL_REASON)
        if status == 202:
            self.view.notice("cancel requested: the run ends at its next step")
        return None


async def chat(opts: ChatOptions) -> int:
    api = GatewayApi(opts.url, opts.token, patience_s=opts.patience_s)
    try:
        return await Chat(opts, api).run()
    except ApiError as err:
        print(f"tether chat: {err.status} {err.code}: {err.message}", file=sys.stderr)
        return EXIT_USAGE if err.status < 500 else EXIT_FAILED
    except GaveUp as err:
        print(f"tether chat: {err}", file=sys.stderr)
        return EXIT_FAILED
    except ValueError as err:
        print(f"tether chat: {err}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        await api.close()


def run_chat(opts: ChatOptions) -> int:
    """The event loop without asyncio.run's own SIGINT handling: Ctrl-C at a prompt raises
    KeyboardInterrupt in the blocking read at once; during a run, `Chat._follow` takes it."""
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(chat(opts))
    except KeyboardInterrupt:
        return EXIT_SIGINT
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
