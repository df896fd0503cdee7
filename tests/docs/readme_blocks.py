"""The README's fenced code blocks, with the marker (an HTML comment on the line just above)
that says what the README test does with each: the README says it in the open, so a reader sees
which examples are executed and why the others are not.

- a shell block (```sh, ```bash, ```shell, ```console) runs, unless `<!-- not-run: reason -->`;
- a Python or JS block runs only when marked `<!-- run … -->`, or `<!-- file: PATH -->` (then
  the block must equal that file and the file runs: the example is the file, exactly);
- a JSX block (a React page) marked `<!-- file: PATH -->` must equal that file, which is not run
  here: a browser test builds it with Vite and drives it in Chromium (test_agui_browser.py,
  test_aisdk_browser.py);
- `<!-- readme-agent: … -->` marks the agent example that tests/integration/test_agent_loading.py
  runs; other blocks (configuration snippets, TOML, sample output) are text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

SHELL = frozenset({"sh", "bash", "shell", "console"})
PYTHON = frozenset({"python", "py"})
JS = frozenset({"js", "javascript", "mjs"})
JSX = frozenset({"jsx"})
_FENCE = re.compile(r"^```(\S*)\s*$")
_MARKER = re.compile(r"^<!--\s*([a-z-]+)\s*:?\s*(.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    lang: str
    code: str
    line: int  # 1-based line of the opening fence
    marker: str  # "not-run", "run", "file", "readme-agent", ... or ""
    argument: str  # the marker's text after the colon

    @property
    def kind(self) -> str:
        if self.lang in SHELL:
            return "shell"
        if self.lang in PYTHON:
            return "python"
        if self.lang in JS:
            return "js"
        if self.lang in JSX:
            return "jsx"
        return "text"

    @property
    def runs(self) -> bool:
        if self.kind == "shell":
            return self.marker != "not-run"
        if self.kind in ("python", "js"):
            return self.marker in ("run", "file")
        return False


def parse(text: str) -> list[Block]:
    blocks: list[Block] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if not fence:
            i += 1
            continue
        start = i
        body: list[str] = []
        i += 1
        while i < len(lines) and lines[i].rstrip() != "```":
            body.append(lines[i])
            i += 1
        assert i < len(lines), f"README line {start + 1}: a code block is never closed"
        marker, argument = "", ""
        above = start - 1
        while above >= 0 and not lines[above].strip():
            above -= 1
        if above >= 0 and (m := _MARKER.match(lines[above].strip())):
            marker, argument = m.group(1), m.group(2)
        blocks.append(
            Block(fence.group(1).lower(), "\n".join(body) + "\n", start + 1, marker, argument)
        )
        i += 1
    return blocks


def read(path: Path) -> list[Block]:
    return parse(path.read_text())
