"""How `tether chat` draws a run in a terminal: the answer's text as it arrives, steps as short
dim lines, an interrupt as a card, the end as a one-line footer. Plain ANSI (colour only on a
terminal, never with NO_COLOR); each event is drawn once, in order, and nothing is redrawn, so
the transcript reads the same in a scrollback, a log file or a pipe."""

from __future__ import annotations

import json
import os
from typing import Any, TextIO

Event = dict[str, Any]

_CODES = {"dim": "2", "bold": "1", "red": "31", "green": "32", "yellow": "33", "cyan": "36"}


def use_color(stream: TextIO, flag: bool | None = None) -> bool:
    if flag is not None:
        return flag
    return stream.isatty() and not os.environ.get("NO_COLOR")


class Renderer:
    """Writes to `out`, keeping track of whether the cursor is mid-line (inside streamed text)."""

    def __init__(self, out: TextIO, *, color: bool, agent: str = "agent") -> None:
        self.out = out
        self.color = color
        self.agent = agent
        self._mid_line = False
        self._message = ""

    def style(self, text: str, *names: str) -> str:
        if not self.color or not names:
            return text
        codes = ";".join(_CODES[n] for n in names)
        return f"\x1b[{codes}m{text}\x1b[0m"

    def _write(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()

    def line(self, text: str = "") -> None:
        """A whole line of its own: after the streamed text, if any, ends its line."""
        self.end_text()
        self._write(text + "\n")

    def end_text(self) -> None:
        if self._mid_line:
            self._write("\n")
            self._mid_line = False

    def notice(self, text: str) -> None:
        self.line(self.style(f"  … {text}", "dim"))

    def event(self, ev: Event) -> None:
        kind = ev.get("type")
        if kind == "text_delta":
            self._text(ev)
        elif kind == "tool_started":
            args = ev.get("argsSummary") or ""
            self.line(self.style(f"  · {ev.get('tool')}({args})", "dim"))
        elif kind == "tool_progress":
            pct = f"{round(100 * float(ev.get('fraction') or 0))}% " if ev.get("fraction") else ""
            self.line(self.style(f"    {ev.get('tool')}: {pct}{ev.get('text') or ''}", "dim"))
        elif kind == "tool_finished":
            ok = ev.get("status") == "success"
            mark = self.style("✓", "green") if ok else self.style("✗", "red")
            self.line(f"  {mark} " + self.style(f"{ev.get('tool')}: {ev.get('summary')}", "dim"))
        elif kind == "interrupt":
            self.card(ev)
        elif kind == "interrupt_resolved":
            self.line(self.style(f"  → {ev.get('decision')}", "cyan"))
        elif kind == "done":
            self._footer(ev)
        elif kind == "error":
            self.line(self.style(f"error {ev.get('code')}: {ev.get('message')}", "red", "bold"))
        elif kind == "cancelled":
            reason = ev.get("reason") or "no reason given"
            self.line(self.style(f"cancelled: {reason}", "yellow"))
        # run_started and reset draw nothing: the prompt already shows the run began.

    def _text(self, ev: Event) -> None:
        message = str(ev.get("messageId") or "")
        if message != self._message or not self._mid_line:
            if message != self._message:
                self.end_text()
                self._message = message
                self._write(self.style(f"{self.agent}> ", "bold"))
            self._mid_line = True
        self._write(str(ev.get("delta") or ""))

    def _footer(self, ev: Event) -> None:
        u = ev.get("usage") or {}
        steps = u.get("modelSteps", 0)
        tokens = f"{u.get('inputTokens', 0)} in / {u.get('outputTokens', 0)} out tokens"
        self.line(
            self.style(f"  (done · {steps} model steps · {tokens} · {ev.get('runId')})", "dim")
        )
        self._message = ""

    def card(self, ev: Event) -> None:
        """An interrupt's card: what is asked, about what, and what it would do."""
        p: dict[str, Any] = ev.get("payload") or {}
        kind = ev.get("kind")
        heads = {
            "confirm_action": "approval needed",
            "select_option": "choose one",
            "provide_input": "input needed",
            "outcome_unknown": "outcome unknown",
        }
        title = p.get("title") or p.get("tool") or ""
        risk = p.get("risk")
        head = f"? {heads.get(str(kind), str(kind))}: {title}"
        if risk:
            head += f"  [risk: {risk}]"
        self.line(self.style(head, "yellow", "bold"))
        for label, key in (("target", "target"), ("action", "parameterSummary"), ("why", "reason")):
            if p.get(key):
                self.line(f"    {label + ':':<8} {p[key]}")
        for key in ("details", "preview"):
            for text_line in str(p.get(key) or "").splitlines():
                self.line(f"    {text_line}")
        for n, o in enumerate(p.get("options") or [], start=1):
            desc = f" — {o['description']}" if o.get("description") else ""
            self.line(f"    {n}) {o.get('label') or o.get('value')}{desc}")
        if ev.get("expiresAt"):
            self.line(self.style(f"    (expires at {ev['expiresAt']})", "dim"))


def json_line(ev: Event) -> str:
    """An event as one compact JSON line, exactly the gateway's object."""
    return json.dumps(ev, ensure_ascii=False, separators=(",", ":"))
