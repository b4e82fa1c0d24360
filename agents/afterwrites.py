"""After a tool call: every file it changed is a write, announced or not.

A shell command's write targets are read before it runs (``agents.shellwrites``), but a
formatter, a code generator, ``make`` or a package manager writes files no parser can
see.  So the hook compares the worktree after the call with the worktree before it:

* before (PreToolUse / BeforeTool): ``remember`` keeps the worktree's *dirty* files
  (``git status --porcelain -z``: modified, added, deleted, untracked and not ignored)
  with a hash of each, in the state directory, per agent and tool call;
* after (PostToolUse / AfterTool): ``changed`` lists the paths whose state differs - a
  path dirty now and clean before, clean now and dirty before, or dirty both times with
  other bytes - and ``after_tool`` reports those still dirty (``written_paths``) with
  ``wrote``: a free path is claimed for the agent, a path another agent holds becomes a
  ``write.unannounced`` event, and the model is told to revert it or ask the holder.

A clean file rewritten with its committed bytes is no change (nothing to coordinate),
and neither is a dirty file put back as committed (``git checkout -- PATH``, removing a
new file): that is what reverting looks like, and reporting it would tell the model to
revert what it has just reverted.
Ignored files are not content.  Without the "before" (the PreToolUse hook is not
installed for this tool, or the call crashed before it) nothing is compared.

Answers, per client (payloads in tests/fixtures/hooks): Claude Code and Codex
``{"decision": "block", "reason": ..., "hookSpecificOutput": {"hookEventName":
"PostToolUse", "additionalContext": ...}}`` (the call already ran: "block" hands the
reason to the model); Gemini CLI ``hookSpecificOutput.additionalContext`` (its
``decision: deny`` would hide the tool's own output) and a ``systemMessage``.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import subprocess
import time
from pathlib import Path

from protocol.files import FileTooLarge, NotRegularFile, read_regular

BEFORE_EVENTS = {"claude": "PreToolUse", "codex": "PreToolUse", "gemini": "BeforeTool"}
AFTER_EVENTS = {"claude": "PostToolUse", "codex": "PostToolUse", "gemini": "AfterTool"}
# Tools whose calls are compared (Claude Code's Write/Edit name their one file, which
# the PreToolUse intent covers; a shell call or a patch may write anything).
COMPARED_TOOLS = {
    "claude": {"Bash"},
    "codex": {"Bash", "shell", "local_shell", "exec_command", "apply_patch"},
    "gemini": {"run_shell_command", "write_file", "replace"},
}
HASH_LIMIT = 64 * 1024 * 1024  # a bigger file is compared by size and mtime instead
KEEP_SECONDS = 24 * 3600  # a "before" whose call never reported back is dropped after this
GIT_TIMEOUT = 30.0


def _dirty(worktree: Path) -> dict[str, str | None]:
    """Dirty path -> a digest of its bytes now (None: absent)."""
    done = subprocess.run(
        ["git", "status", "--porcelain=v1", "-z", "--untracked-files=all", "--no-renames"],
        cwd=worktree, capture_output=True, timeout=GIT_TIMEOUT, stdin=subprocess.DEVNULL,
    )
    if done.returncode != 0:
        raise OSError(f"git status failed in {worktree}: {done.stderr.decode(errors='replace').strip()}")
    paths = [entry[3:].decode(errors="surrogateescape") for entry in done.stdout.split(b"\0") if len(entry) > 3]
    return {path: _digest(worktree / path) for path in paths}


def _digest(path: Path) -> str | None:
    try:
        return hashlib.sha1(read_regular(path, HASH_LIMIT)).hexdigest()
    except FileTooLarge:
        info = path.stat()
        return f"size:{info.st_size}:mtime:{info.st_mtime_ns}"
    except (FileNotFoundError, NotADirectoryError):
        return None
    except NotRegularFile as exc:  # a directory, or a FIFO or device (no bytes: never read)
        return "directory" if exc.errno == errno.EISDIR else "special"


def changed(before: dict[str, str | None], after: dict[str, str | None]) -> list[str]:
    """Paths whose state differs between two ``_dirty`` readings, sorted (see the
    module docstring: a path missing from a reading is clean there)."""
    return sorted(p for p in set(before) | set(after) if (p in before) != (p in after) or before.get(p) != after.get(p))


def _call_key(event: dict) -> str:
    raw = str(event.get("tool_use_id") or "last")
    return "".join(c for c in raw if c.isalnum() or c in "-_")[:80] or "last"


def _folder(state_dir: Path, agent: str) -> Path:
    """The agent's own folder under ``calls``: never ``.`` or ``..`` (an agent name the
    coordinator refuses can still reach here), whose sweep would take other files."""
    name = "".join(c if c.isalnum() or c in "-_.@+" else "_" for c in agent)
    return state_dir / "calls" / (name if name[:1].isalnum() else f"_{name}")


def remember(state_dir: Path, worktree: Path, agent: str, event: dict) -> None:
    """Keep the worktree's dirty files before the call (see the module docstring)."""
    folder = _folder(state_dir, agent)
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    now = time.time()
    for old in folder.glob("*.json"):  # calls that never reported back
        try:
            if now - old.stat().st_mtime > KEEP_SECONDS:
                old.unlink()
        except OSError:
            pass
    state = {"worktree": str(worktree), "dirty": _dirty(worktree)}
    target = folder / f"{_call_key(event)}.json"
    temporary = target.with_suffix(f".{os.getpid()}.tmp")
    temporary.write_text(json.dumps(state))
    os.replace(temporary, target)


def recall(state_dir: Path, agent: str, event: dict) -> dict[str, str | None] | None:
    """The dirty files before this call (and forget them), or None if never kept."""
    target = _folder(state_dir, agent) / f"{_call_key(event)}.json"
    try:
        state = json.loads(target.read_text())
    except (OSError, ValueError):
        return None
    try:
        target.unlink()
    except OSError:
        pass
    dirty = state.get("dirty") if isinstance(state, dict) else None
    return dirty if isinstance(dirty, dict) else None


def written_paths(state_dir: Path, worktree: Path, agent: str, event: dict) -> list[str] | None:
    """Worktree-relative paths the call changed and left differing from the commit (see
    the module docstring), or None when there is no "before"."""
    before = recall(state_dir, agent, event)
    if before is None:
        return None
    after = _dirty(worktree)
    return [path for path in changed(before, after) if path in after]


def feedback(client: str, paths: list[str], decision) -> str:
    """The answer telling the model what it wrote that others hold."""
    holders = ", ".join(decision.holders) or "another agent"
    listed = ", ".join(paths[:20]) + (f" and {len(paths) - 20} more" if len(paths) > 20 else "")
    message = (
        f"lockstep: this call wrote {listed}, which {holders} holds ({decision.reason}). "
        f"Put it back as it was (e.g. `git checkout -- PATH`, or undo your change) or ask {holders} "
        "to release it; do not keep writing it."
    )
    if client == "gemini":
        return json.dumps({"systemMessage": message, "hookSpecificOutput": {"additionalContext": message}})
    return json.dumps({"decision": "block", "reason": message, "hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": message}})
