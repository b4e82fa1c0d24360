"""Install Lockstep's hooks into a coding client's settings, and take them out again.

``lockstep hook install claude|codex|gemini`` edits one JSON settings file:

=========  ===============================  ================================
client     --project (the worktree)         --user (the home folder)
=========  ===============================  ================================
claude     ``.claude/settings.json``        ``~/.claude/settings.json``
codex      ``.codex/hooks.json``            ``~/.codex/hooks.json``
gemini     ``.gemini/settings.json``        ``~/.gemini/settings.json``
=========  ===============================  ================================

All three files keep hooks the same way (Claude Code's shape, which Codex and Gemini CLI
adopted): ``{"hooks": {EVENT: [{"matcher": REGEX, "hooks": [{"type": "command",
"command": ...}]}]}}``.

Rules of the edit:

* Merge, never replace: everything else in the file - other keys, other events, other
  matcher groups, other commands in a group - is kept as it is, in its order.
* Ours are recognised by their command (``... hook CLIENT`` run through ``lockstep`` or
  ``agents.cli``).  Installing first takes ours out, then adds one fresh group per event,
  so running it twice changes nothing the second time, and an older install (say, one
  whose matcher lacked ``Bash``) is brought up to date.
* Uninstalling takes out only our commands; a group, event or ``hooks`` object left
  empty by that goes too.
* A file that is not a JSON object is refused (``UsageError``), never overwritten.

The pure part (``plan``) computes the new settings from the old; ``apply`` writes them.
"""

from __future__ import annotations

import difflib
import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.toolwrites import GEMINI_MCP_FILE_MATCHER, MCP_FILE_MATCHER
from protocol import jsontext
from protocol.errors import UsageError

__all__ = ["CLIENTS", "Change", "apply", "default_command", "plan", "settings_path"]

# A turn-end hook may wait for a verify run (agents/turns.py waits at most 570 s).
STOP_TIMEOUT = 600
# Per client: the settings files and {event: (matcher or None, timeout)}; Gemini CLI
# counts timeouts in milliseconds, the others in seconds.  Only events the hook
# commands act on are registered: a hook process costs every tool call a start-up.
CLIENTS: dict[str, dict[str, Any]] = {
    "claude": {
        "project": ".claude/settings.json",
        "user": ".claude/settings.json",
        "events": {
            "PreToolUse": (f"Write|Edit|MultiEdit|NotebookEdit|Bash|{MCP_FILE_MATCHER}", 30),
            "PostToolUse": ("Write|Bash", 30),
            "UserPromptSubmit": (None, 30),
            "Stop": (None, STOP_TIMEOUT),
            "SubagentStop": (None, STOP_TIMEOUT),
        },
    },
    "codex": {
        "project": ".codex/hooks.json",
        "user": ".codex/hooks.json",
        "events": {
            "PreToolUse": (f"Bash|apply_patch|{MCP_FILE_MATCHER}", 30),
            "PostToolUse": ("Bash|apply_patch", 30),
            "UserPromptSubmit": (None, 30),
            "Stop": (None, STOP_TIMEOUT),
        },
    },
    "gemini": {
        "project": ".gemini/settings.json",
        "user": ".gemini/settings.json",
        "events": {
            "BeforeTool": (f"write_file|replace|run_shell_command|{GEMINI_MCP_FILE_MATCHER}", 30_000),
            "AfterTool": ("write_file|replace|run_shell_command", 30_000),
            "BeforeAgent": (None, 30_000),
            "AfterAgent": (None, STOP_TIMEOUT * 1000),
        },
    },
}


@dataclass(frozen=True)
class Change:
    path: Path
    before: str | None  # the file's text, None if it did not exist
    after: str | None  # the new text, None if the file is to be removed

    @property
    def changed(self) -> bool:
        return self.before != self.after

    def diff(self) -> str:
        old = (self.before or "").splitlines(keepends=True)
        new = (self.after or "").splitlines(keepends=True)
        return "".join(difflib.unified_diff(old, new, f"{self.path} (before)", f"{self.path} (after)"))


def settings_path(client: str, scope: str, worktree: Path, home: Path | None = None) -> Path:
    spec = _spec(client)
    if scope == "user":
        return (home or Path.home()) / spec["user"]
    return worktree / spec["project"]


def default_command(client: str) -> str:
    """``lockstep hook CLIENT`` when ``lockstep`` is on PATH, else this interpreter
    running the package (a checkout without an installed entry point)."""
    if shutil.which("lockstep"):
        return f"lockstep hook {client}"
    return f'"{sys.executable}" -m agents.cli hook {client}'


def is_ours(hook: Any, client: str) -> bool:
    if not isinstance(hook, dict) or not isinstance(hook.get("command"), str):
        return False
    command = hook["command"]
    return f"hook {client}" in command and ("lockstep" in command or "agents.cli" in command)


def plan(client: str, path: Path, command: str | None = None, uninstall: bool = False) -> Change:
    """The change installing (or removing) ``client``'s hooks in the file at ``path``."""
    spec = _spec(client)
    try:
        before = path.read_text(encoding="utf-8") if path.exists() else None
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path} is not UTF-8 ({exc.reason} at byte {exc.start}); fix it by hand, then install again") from None
    settings = _load(before, path)
    hooks = settings.get("hooks")
    if hooks is not None and not isinstance(hooks, dict):
        raise UsageError(f"{path}: 'hooks' is {type(hooks).__name__}, not an object; fix it by hand first")
    hooks = dict(hooks or {})
    for event in list(hooks):
        groups = hooks[event]
        if not isinstance(groups, list):
            continue  # not ours to judge
        kept = [group for group in (_without_ours(group, client) for group in groups) if group is not None]
        if kept:
            hooks[event] = kept
        else:
            del hooks[event]
    if not uninstall:
        command = command or default_command(client)
        for event, (matcher, timeout) in spec["events"].items():
            entry: dict[str, Any] = {"type": "command", "command": command, "timeout": timeout}
            if client == "gemini":
                entry = {"name": "lockstep", **entry}
            group: dict[str, Any] = {"matcher": matcher} if matcher else {}
            group["hooks"] = [entry]
            groups = hooks.setdefault(event, [])
            if not isinstance(groups, list):  # ours to add to: refused, not a traceback
                raise UsageError(f"{path}: 'hooks.{event}' is {type(groups).__name__}, not an array; fix it by hand first")
            groups.append(group)
    if hooks:
        settings["hooks"] = hooks
    else:
        settings.pop("hooks", None)
    if before is None and not settings:
        return Change(path, None, None)
    try:
        after = json.dumps(settings, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    except ValueError:  # 1e400 read as inf would be written back as Infinity, which the client cannot read
        raise UsageError(f"{path} holds a number JSON cannot write back (NaN, Infinity or one past 1e308); fix it by hand first") from None
    if before is not None and _load(before, path) == settings:
        after = before  # same content: leave the file's own formatting alone
    return Change(path, before, after)


def apply(change: Change) -> None:
    """Write the change atomically (a temporary file renamed over the old one)."""
    if not change.changed or change.after is None:
        return
    # A settings file that is a symlink (into a dotfiles repository) is changed where it
    # points: renaming over the link replaced it with a copy, and the dotfiles kept the old.
    target = Path(os.path.realpath(change.path))
    target.parent.mkdir(parents=True, exist_ok=True)
    temporary = target.with_name(f".{target.name}.lockstep-{os.getpid()}")
    temporary.write_text(change.after, encoding="utf-8")
    if target.exists():
        os.chmod(temporary, target.stat().st_mode & 0o7777)
    os.replace(temporary, target)


def _spec(client: str) -> dict[str, Any]:
    try:
        return CLIENTS[client]
    except KeyError:
        raise UsageError(f"unknown client {client!r}; choose one of {', '.join(CLIENTS)}") from None


def _load(text: str | None, path: Path) -> dict:
    if text is None or not text.strip():
        return {}
    try:
        settings = jsontext.loads(text)
    except ValueError as exc:
        raise UsageError(f"{path} is not valid JSON ({exc}); fix it by hand, then install again") from None
    if not isinstance(settings, dict):
        raise UsageError(f"{path} holds a JSON {type(settings).__name__}, not an object; fix it by hand first")
    return settings


def _without_ours(group: Any, client: str) -> Any:
    """The matcher group without our commands; None if nothing of it is left."""
    if not isinstance(group, dict) or not isinstance(group.get("hooks"), list):
        return group
    kept = [hook for hook in group["hooks"] if not is_ours(hook, client)]
    if len(kept) == len(group["hooks"]):
        return group
    if not kept:
        return None
    return {**group, "hooks": kept}
