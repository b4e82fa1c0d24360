"""Before a coding client's tool call: which files it will write, and the answer to give.

One reading for three clients (payloads in tests/fixtures/hooks, sources in its README):

==========  ====================================  ==========================================
client      tool (``tool_name``)                   files it writes
==========  ====================================  ==========================================
claude      Write, Edit, MultiEdit, NotebookEdit   ``tool_input.file_path`` / ``notebook_path``
claude      Bash                                   ``agents.shellwrites`` on ``command``
claude,     mcp__SERVER__write_file, edit_file,    ``path`` (``source`` and ``destination``
codex       create_file, move_file                 for move_file): the MCP filesystem server
gemini      edit_file, create_file, move_file,     the same (an MCP tool keeps its own name
            SERVER__write_file, ...                unless another tool has it)
codex       apply_patch                            ``agents.patches`` on ``tool_input.command``
                                                   (text, or the argv ``["apply_patch", PATCH]``)
codex       Bash                                   ``agents.shellwrites`` on ``command``, and
                                                   ``agents.patches`` on any envelope in it
gemini      write_file, replace                    ``tool_input.file_path``
gemini      run_shell_command                      ``agents.shellwrites``, in ``directory``
                                                   (``dir_path`` in newer releases)
==========  ====================================  ==========================================

Paths are concrete files, resolved against the event's ``cwd``; a name with ``[``, ``*``
or ``?`` is that name (``agents.paths.repo_relative(..., literal=True)``).  A shell glob
is expanded against the file system as the shell would; one matching nothing is kept as
written, and so is a file that has the glob's name as written (``rm 'x[1].py'``: the
quotes are gone when the command is read).  A folder a command writes (``rm -r``,
``chmod -R``, ``mv``) is the files in it.  A symbolic link is a file of its own folder
(``rm link``, ``ln -sfn``), and a link to a file stands for that file too (``echo x >
link`` writes it): both are asked for.

Answers, in each client's documented format:

* deny - Claude Code and Codex: ``hookSpecificOutput.permissionDecision = "deny"`` with the
  reason (shown to the model); Gemini CLI: ``{"decision": "deny", "reason": ...}``.
* warn (``parallel-warn`` mode, coordinator down, unreadable input) - exit 0 with JSON the
  client shows: ``systemMessage`` (the user) and, for Claude Code and Codex,
  ``hookSpecificOutput.additionalContext`` (the model).  Never exit 1, which the clients
  treat as a hook failure and ignore.
"""

from __future__ import annotations

import glob as globbing
import json
import os
from itertools import islice
from typing import Callable, NamedTuple

from protocol import jsontext
from protocol.errors import LockstepError

CLIENT_EVENTS = {"claude": "PreToolUse", "codex": "PreToolUse", "gemini": "BeforeTool"}
FILE_TOOLS = {
    "claude": {"Write", "Edit", "MultiEdit", "NotebookEdit"},
    "codex": set(),
    "gemini": {"write_file", "replace"},
}
SHELL_TOOLS = {"claude": {"Bash"}, "codex": {"Bash", "shell", "local_shell", "exec_command"}, "gemini": {"run_shell_command"}}
PATCH_TOOLS = {"claude": set(), "codex": {"apply_patch"}, "gemini": set()}
PATCH_COMMANDS = ("apply_patch", "applypatch")  # the names Codex runs a patch under
# MCP tools that write files (the reference filesystem server's), and the arguments that
# name the files.  Claude Code and Codex name them ``mcp__SERVER__TOOL``; Gemini CLI by
# the tool's own name, or ``SERVER__TOOL`` when another tool has it (its own write_file).
MCP_FILE_TOOLS = {"write_file": ("path",), "edit_file": ("path",), "create_file": ("path",), "move_file": ("source", "destination")}
MCP_FILE_MATCHER = "mcp__.*__(write_file|edit_file|create_file|move_file)"  # for the hooks' settings
GEMINI_MCP_FILE_MATCHER = "edit_file|create_file|move_file|.*__(write_file|edit_file|create_file|move_file)"
MAX_GLOB_MATCHES = 1000
INTENT_BYTES = 192 * 1024  # the files one intent names, in bytes: under the message cap (protocol.messages)
MAX_LISTED_FOLDERS = 50  # folders whose files git lists for one call (formatters, find, xargs)


class Targets(NamedTuple):
    paths: list[str]  # absolute or cwd-relative file paths
    unknown: list[str]  # why the call may write more than that
    maybe: list[str] = []  # files the call may rewrite (a formatter's, in a folder): checked, not claimed


class Answer(NamedTuple):
    exit_code: int
    stdout: str = ""
    stderr: str = ""


def targets(client: str, event: dict) -> Targets:
    """The files the event's tool call will write (never raises on odd input)."""
    tool = event.get("tool_name")
    tool_input = event.get("tool_input")
    if not isinstance(tool_input, dict):
        return Targets([], [] if tool_input is None else ["tool_input is not an object"])
    cwd = str(event.get("cwd") or os.getcwd())
    if tool in FILE_TOOLS.get(client, ()):
        path = tool_input.get("file_path") or tool_input.get("notebook_path")
        return Targets([path] if isinstance(path, str) and path else [], [])
    keys = mcp_file_arguments(tool, client)
    if keys is not None:
        paths = [tool_input.get(key) for key in keys]
        return Targets([path for path in paths if isinstance(path, str) and path], [])
    if tool in PATCH_TOOLS.get(client, ()):
        from agents.patches import patch_files

        patch = tool_input.get("command", tool_input.get("input"))
        if isinstance(patch, list) and len(patch) == 2 and patch[0] in PATCH_COMMANDS:  # the argv form
            patch = patch[1]
        found = patch_files(patch)
        return Targets(found.paths, found.problems)
    if tool in SHELL_TOOLS.get(client, ()):
        command = tool_input.get("command", tool_input.get("cmd"))
        words = [word for word in command if isinstance(word, str)] if isinstance(command, list) else [command]
        if isinstance(command, list):  # an argv form
            import shlex

            command = shlex.join(str(word) for word in command)
        folder = tool_input.get("directory") or tool_input.get("dir_path") or tool_input.get("workdir") or ""
        here = os.path.join(cwd, folder) if isinstance(folder, str) else cwd
        found = _shell_targets(command, here)
        if client == "codex":
            found.paths.extend(_patched_by_shell(words, here))
        return found
    return Targets([], [])


def mcp_file_arguments(tool: object, client: str) -> tuple[str, ...] | None:
    """The arguments naming files, if ``tool`` is an MCP tool that writes them."""
    if not isinstance(tool, str):
        return None
    if client == "gemini":  # (its own write_file is a file tool, matched before this)
        return MCP_FILE_TOOLS.get(tool.rsplit("__", 1)[-1])
    if tool.startswith("mcp__") and tool.count("__") >= 2:
        return MCP_FILE_TOOLS.get(tool.rsplit("__", 1)[1])
    return None


def _patched_by_shell(words: list, here: str) -> list[str]:
    """Codex applies a shell call of ``apply_patch`` itself (``apply_patch <<'EOF'`` ...,
    or the argv ``["apply_patch", PATCH]``): the files of any envelope in the command."""
    from agents.patches import patch_files

    paths: list[str] = []
    for word in words:
        if isinstance(word, str) and "*** Begin Patch" in word:
            paths += [os.path.join(here, path) for path in patch_files(word).paths]
    return paths


def _shell_targets(command: object, here: str) -> Targets:
    from agents.shellwrites import write_targets

    found = write_targets(command, is_dir=lambda path: os.path.isdir(os.path.join(here, path)),  # type: ignore[arg-type]
                          read_list=lambda path: _list_text(os.path.join(here, path)))
    # What git only puts back is not asked for: it is how the model reverts a held file it
    # wrote (as the after-call feedback tells it to); a file left changed by it is still
    # reported by the after-call comparison.
    restored = set(found.restores)
    paths = [os.path.join(here, path) for path in found.targets if path not in restored]
    unknown = list(found.unknown)
    left = MAX_GLOB_MATCHES  # for all the call's globs together: `rm /*/*/*/*` once listed half the disk first
    for pattern in found.globs:
        full = os.path.join(here, pattern)
        matches = sorted(islice(globbing.iglob(full), left + 1))  # lazily: no more is listed than is kept
        if len(matches) > left:
            unknown.append(f"{full}: more than {MAX_GLOB_MATCHES} files match the globs of this call: checked after the call")
            paths += matches[:left]
            left = 0
            continue
        left -= len(matches)
        # A file named as written ('[ab].py', quoted in the command: the quotes are gone
        # here) is that file; matching nothing, the name as written is too, as in bash.
        literal = [full] if os.path.lexists(full) or not matches else []
        paths += [path for path in literal + matches if path not in paths]
    paths += _diffed_files(found.diffs, here, unknown)
    files, unknown = _folders_as_files(paths, unknown)
    maybe = _formatted_files(found.formatted, here, unknown)
    return Targets(files, unknown, maybe)


def _list_text(path: str) -> str | None:
    """The text of a list of names xargs is given (``xargs rm < list.txt``), read before
    the call; None when it is no regular file (a FIFO would hang the hook), is missing or
    unreadable, or holds more than ``MAX_LIST_BYTES``: the command's writes are then left
    to the after-call comparison."""
    from agents.shellwrites import MAX_LIST_BYTES
    from protocol.files import read_regular

    try:
        return read_regular(path, MAX_LIST_BYTES).decode("utf-8", "surrogateescape")
    except (OSError, ValueError):
        return None


def _diffed_files(diffs: list, here: str, unknown: list[str]) -> list[str]:
    """The files the diffs a call applies name (``git apply``, ``patch``: ``agents.diffs``),
    a diff file read here (up to ``MAX_DIFF_CHARS``); one that cannot be read is left to
    the after-call comparison (noted in ``unknown``)."""
    from agents.diffs import MAX_DIFF_CHARS, diff_paths

    files: list[str] = []
    unique = list({(d.text, d.file, d.strip, d.folder, d.from_top, d.directory): d for d in diffs}.values())
    if len(unique) > MAX_LISTED_FOLDERS:  # each is a file read: a long command of them is bounded
        unknown.append(f"more than {MAX_LISTED_FOLDERS} diffs in this call: past them, checked after the call")
        unique = unique[:MAX_LISTED_FOLDERS]
    for diff in unique:
        text = diff.text
        if text is None:
            from protocol.files import read_regular

            path = os.path.join(here, diff.file)
            try:  # a regular file only: a FIFO would hang the hook, a device never end
                text = read_regular(path, MAX_DIFF_CHARS).decode("utf-8", "replace")
            except (OSError, ValueError) as exc:
                unknown.append(f"{path}: the diff cannot be read ({type(exc).__name__}): the files it names are checked after the call")
                continue
        root = os.path.join(here, diff.folder)
        if diff.from_top:
            from protocol.discovery import locate

            place = locate(root)
            root = str(place.worktree) if place.in_git else root
        files = list(dict.fromkeys(files + [os.path.join(root, diff.directory, name) for name in diff_paths(text, diff.strip)]))
        if len(files) > MAX_GLOB_MATCHES:
            unknown.append(f"more than {MAX_GLOB_MATCHES} files in the diffs of this call: checked after the call")
            return files[:MAX_GLOB_MATCHES]
    return files


def _formatted_files(formatted: list[tuple[str, tuple[str, ...]]], here: str, unknown: list[str]) -> list[str]:
    """The files a formatter may rewrite in each folder it is run on: those git lists
    there (tracked, and untracked ones it does not ignore: what formatters format, as
    they skip ignored files too) with the tool's suffixes.  A folder git cannot list,
    or past ``MAX_GLOB_MATCHES`` files in all, is left to the after-call comparison
    (noted in ``unknown``)."""
    import subprocess

    files: list[str] = []
    by_folder: dict[str, tuple[str, ...]] = {}  # `black src; black src`: one listing, the suffixes together
    for folder, suffixes in formatted:
        by_folder[folder] = tuple(dict.fromkeys(by_folder.get(folder, ()) + tuple(suffixes)))
    formatted = list(by_folder.items())
    if len(formatted) > MAX_LISTED_FOLDERS:  # each folder costs a git run: a long command of them is bounded
        unknown.append(f"more than {MAX_LISTED_FOLDERS} folders whose files this call may rewrite: past them, checked after the call")
        formatted = formatted[:MAX_LISTED_FOLDERS]
    for folder, suffixes in formatted:
        path = os.path.join(here, folder)
        if not os.path.isdir(path):
            continue  # the tool says so itself; nothing there to rewrite
        try:
            listed = subprocess.run(
                ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", "."],
                cwd=path, capture_output=True, timeout=30, stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            unknown.append(f"{path}: git could not list the files a formatter may rewrite ({exc}): checked after the call")
            continue
        if listed.returncode != 0:
            unknown.append(f"{path}: not in a git worktree: the files a formatter rewrites there are checked after the call")
            continue
        names = [name for name in dict.fromkeys(os.fsdecode(raw) for raw in listed.stdout.split(b"\0") if raw) if name.endswith(suffixes)]
        if len(files) + len(names) > MAX_GLOB_MATCHES:
            unknown.append(f"{path}: more than {MAX_GLOB_MATCHES} files a formatter may rewrite: checked after the call")
            continue
        files += [os.path.join(path, name) for name in names]
    return files


def _folders_as_files(paths: list[str], unknown: list[str]) -> tuple[list[str], list[str]]:
    """A folder a command writes (``rm -r src``, ``chmod -R``, ``mv src lib``) is the
    files in it: an intent names concrete files, and one folder among the targets would
    otherwise make the whole call uncoordinated.  Folders past ``MAX_GLOB_MATCHES``
    files in all are left to the after-call comparison."""
    files: list[str] = []
    unknown = list(unknown)
    expanded = 0  # files from folders, all together: one intent stays a bounded message
    for path in paths:
        if not os.path.isdir(path) or os.path.islink(path):
            files.append(path)
            continue
        if os.path.basename(os.path.normpath(path)) == ".git":
            continue  # git's own files: not listed (the resolver drops them anyway)
        inside = []
        for folder, subfolders, names in os.walk(path):
            subfolders[:] = sorted(d for d in subfolders if d != ".git")
            inside += [os.path.join(folder, name) for name in sorted(names)]
            if expanded + len(inside) > MAX_GLOB_MATCHES:
                break
        if expanded + len(inside) > MAX_GLOB_MATCHES:
            unknown.append(f"{path}: more than {MAX_GLOB_MATCHES} files in the folders this call writes: checked after the call")
        else:
            files += inside
            expanded += len(inside)
    return files, unknown


def deny(client: str, reason: str) -> Answer:
    if client == "gemini":
        return Answer(0, json.dumps({"decision": "deny", "reason": reason}))
    return Answer(0, json.dumps({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny", "permissionDecisionReason": reason}}))


def warn(client: str, message: str, event_name: str | None = None) -> Answer:
    """Exit 0 with a message the client shows (to the model where it can)."""
    document: dict = {"systemMessage": message}
    if client in ("claude", "codex") and event_name in ("PreToolUse", "PostToolUse", "UserPromptSubmit"):
        document["hookSpecificOutput"] = {"hookEventName": event_name, "additionalContext": message}
    elif client == "gemini" and event_name in ("AfterTool", "BeforeAgent"):
        document["hookSpecificOutput"] = {"additionalContext": message}
    return Answer(0, json.dumps(document))


# (repo-relative escaped paths, files the call may rewrite) -> (verdict, reason[, context])
Decide = Callable[[list[str], list[str]], "tuple[str, ...]"]


def before_tool(client: str, event: dict, decide: Decide, resolve: Callable[[str], "str | None"]) -> Answer:
    """The answer to a pre-tool event: one intent for every file the call writes.

    ``resolve(path)`` gives the repo-relative literal pattern, or None outside the
    repository, and raises ``WriteElsewhere`` for a path in another worktree of it
    (the call is denied); ``decide(patterns, maybe)`` asks the coordinator (``maybe``:
    files the call may rewrite, such as a formatter's in a folder, checked but not claimed)."""
    from agents.paths import WriteElsewhere

    found = targets(client, event)
    paths = _with_link_targets(found.paths, str(event.get("cwd") or os.getcwd()))
    try:
        patterns = list(dict.fromkeys(p for p in (resolve(path) for path in paths) if p))
        maybe = list(dict.fromkeys(p for p in (resolve(path) for path in found.maybe) if p and p not in patterns))
    except WriteElsewhere as exc:
        return deny(client, f"lockstep: {exc}")
    if not patterns and not maybe:
        return Answer(0, "{}")
    patterns, maybe = _within_one_message(patterns, maybe)
    verdict, reason, *more = decide(patterns, maybe)
    context = more[0] if more else ""  # the agent's messages and tasks not shown yet
    if verdict == "block":
        return deny(client, f"lockstep: {reason}" + (f"\n{context}" if context else ""))
    if verdict == "warn":
        return warn(client, f"lockstep: {reason}" + (f"\n{context}" if context else ""), CLIENT_EVENTS[client] if client != "gemini" else None)
    if context:
        return warn(client, context, CLIENT_EVENTS[client])
    return Answer(0, "{}")


def _within_one_message(patterns: list[str], maybe: list[str]) -> tuple[list[str], list[str]]:
    """As many of the files as one intent carries (``INTENT_BYTES``), the files written
    first: an intent past the message cap was refused whole, so a call naming many long
    names went unasked, held files and all.  What is left out is checked after the call."""
    budget = INTENT_BYTES
    kept: tuple[list[str], list[str]] = ([], [])
    for listed, into in ((patterns, kept[0]), (maybe, kept[1])):
        for pattern in listed:
            budget -= len(pattern.encode("utf-8", "surrogateescape")) + 8  # its bytes and the framing around it
            if budget < 0:
                return kept
            into.append(pattern)
    return kept


def agent_for(client: str, event: dict) -> str:
    name = os.environ.get("LOCKSTEP_AGENT")
    if name:
        return name
    session = "".join(c for c in str(event.get("session_id", "")) if c.isascii() and c.isalnum())[:12]  # "é" is no part of an agent name
    return f"{client}-{session or 'anonymous'}"


def answer(client: str, text: str, endpoint: str | None = None, fail_closed: bool = False) -> Answer:
    """The whole hook: stdin text in, the client's answer out.

    Every failure - input that is not an event, no coordinator, an unexpected error -
    denies under ``fail_closed`` and otherwise lets the call go on with a visible
    warning; the exit code is never 1 (which the clients would silently ignore)."""
    try:
        event = jsontext.loads(text)
    except ValueError as exc:
        event, problem = {}, f"hook input is not JSON ({exc})"
    else:
        is_event = isinstance(event, dict) and isinstance(event.get("hook_event_name"), str)
        problem = None if is_event else f"hook input is not a {client} hook event"
    if problem is not None:
        return failure(client, problem, None, fail_closed)
    kind = event.get("hook_event_name")
    from agents.hookinput import cwd_problem

    problem = cwd_problem(event)
    if problem is not None:  # a cwd that is no folder name: an answer as for any failure, not str(5) as a folder
        return failure(client, problem, kind, fail_closed, looping=event.get("stop_hook_active") is True)
    from agents import afterwrites, turns

    try:
        if kind == CLIENT_EVENTS[client]:
            answer = before_tool(client, event, _decider(client, event, endpoint), _resolver(event))
            problem = _remember(client, event, answer)
            if problem is None:
                return answer
            if fail_closed:
                return deny(client, f"lockstep: {problem} (--fail-closed)")
            # the call goes on: say so, keeping any warning the intent gave
            earlier = json.loads(answer.stdout).get("systemMessage") if answer.stdout != "{}" else None
            message = f"lockstep: {problem}; the files this call writes will not be compared after it"
            return warn(client, f"{earlier}\n{message}" if earlier else message, kind if client != "gemini" else None)
        if kind == afterwrites.AFTER_EVENTS[client] and event.get("tool_name") in afterwrites.COMPARED_TOOLS[client]:
            return after_tool(client, event, endpoint)
        if kind in turns.TURN_ENDS[client]:
            return Answer(0, turns.turn_end(client, agent_for(client, event), event, endpoint))
        if kind in turns.TURN_STARTS[client]:
            return Answer(0, turns.turn_start(agent_for(client, event), event, endpoint, client))
        return Answer(0, "{}")
    except Exception as exc:  # noqa: BLE001 - every failure gets an answer the client shows
        # Said on purpose (no coordinator, an error reply, a malformed --endpoint): as is.
        said = getattr(exc, "message", None) if isinstance(exc, LockstepError) else None
        message = said or (f"{exc}" if isinstance(exc, LockstepError) else f"unexpected {type(exc).__name__}: {exc}")
        return failure(client, message, kind, fail_closed, looping=event.get("stop_hook_active") is True)


def _remember(client: str, event: dict, answer: Answer) -> str | None:
    """Before a compared call that goes ahead: keep the worktree's dirty files, so the
    call's after-hook sees every file it changed.  A failure here is returned (the
    comparison is then skipped): the caller says so, or denies under --fail-closed."""
    from agents import afterwrites

    if event.get("tool_name") not in afterwrites.COMPARED_TOOLS[client] or '"deny"' in answer.stdout:
        return None
    try:
        from protocol.discovery import locate

        place = locate(str(event.get("cwd") or os.getcwd()))
        if not place.in_git:
            return None  # no repository here: nothing to coordinate, nothing to keep
        afterwrites.remember(place.state_dir, place.worktree, agent_for(client, event), event)
    except Exception as exc:  # noqa: BLE001 - see the docstring
        return f"the worktree could not be read before the call ({type(exc).__name__}: {exc})"
    return None


def after_tool(client: str, event: dict, endpoint: str | None) -> Answer:
    """After a compared call, in one connection: every file it changed is reported
    (``wrote``), and a shell call's command too (``ran``: the ``[[trigger]]``s it
    matches run their probes, whose findings go through the rules; the hook does not
    wait for them).  What another agent holds is fed back to the model
    (agents/afterwrites.py).  With no coordinator and no write there is nothing to
    trigger and nothing to say."""
    from agents import afterwrites
    from agents.oneshot import CoordinatorUnreachable, open_oneshot
    from protocol import messages as m
    from protocol.discovery import locate
    from protocol.paths import Pattern, escape, overlaps

    cwd = str(event.get("cwd") or os.getcwd())
    place = locate(cwd)
    agent = agent_for(client, event)
    paths = afterwrites.written_paths(place.state_dir, place.worktree, agent, event)
    command = _shell_command(event) if event.get("tool_name") in SHELL_TOOLS[client] else None
    if not paths and command is None:
        return Answer(0, "{}")
    source = f"{client} {event.get('hook_event_name')} {event.get('tool_name')}"
    decision = None
    try:
        with open_oneshot(agent, cwd=cwd, endpoint=endpoint) as session:
            if paths:
                decision = session.wrote([escape(path) for path in paths], source=source)
            if command is not None:
                session.call(lambda s: m.Ran(session=s, command=command[:4000], cwd=cwd))
    except CoordinatorUnreachable:
        if paths:
            raise  # the writes go uncoordinated: the failure answer says so
        return Answer(0, "{}")
    if decision is None or decision.verdict == "allow" or not decision.holders:
        return Answer(0, "{}")
    patterns = [Pattern.parse(c.pattern) for c in decision.conflicts]
    held = [p for p in paths if any(overlaps(q, Pattern.parse(escape(p))) for q in patterns)] or paths
    return Answer(0, afterwrites.feedback(client, held, decision))


def _shell_command(event: dict) -> str | None:
    """The command line of a shell tool call's input, or None."""
    tool_input = event.get("tool_input")
    command = tool_input.get("command", tool_input.get("cmd")) if isinstance(tool_input, dict) else None
    if isinstance(command, list):
        import shlex

        command = shlex.join(str(part) for part in command)
    return command if isinstance(command, str) and command.strip() else None


def failure(client: str, problem: str, kind: str | None, fail_closed: bool, looping: bool = False) -> Answer:
    """The answer when the hook could not do its work (``problem``) on a ``kind`` event
    (None: the input was not an event): never exit 1; see ``answer``."""
    from agents import afterwrites, turns

    if kind == afterwrites.AFTER_EVENTS[client]:  # the call ran: say so, never refuse after the fact
        return warn(client, f"lockstep: {problem}; the files this call wrote are not coordinated", kind)

    if kind in turns.TURN_ENDS[client]:  # a stop: blocking it again and again would trap the model
        if fail_closed and not looping:
            return Answer(0, turns.block(client, f"lockstep: {problem}; the turn's work is not verified (--fail-closed)"))
        return Answer(0, turns.let_end(f"lockstep: {problem}; this turn ends unverified"))
    if kind in turns.TURN_STARTS[client]:  # never refuse a user's prompt for our failure
        return warn(client, f"lockstep: {problem}; this turn is not tracked", kind)
    if fail_closed:
        return deny(client, f"lockstep: {problem} (--fail-closed)")
    return warn(client, f"lockstep: {problem}; this write is not coordinated", kind)


def _resolver(event: dict) -> Callable[[str], "str | None"]:
    from agents.paths import check_own_worktree, located, located_link
    from protocol.discovery import locate
    from protocol.errors import LockstepError
    from protocol.paths import CONTROL_CHARACTER

    cwd = str(event.get("cwd") or os.getcwd())
    places: list = []  # found on first use: a call writing nothing needs no git

    def resolve(path: str) -> str | None:
        if not places:
            places.append(locate(cwd))
        if not places[0].in_git:
            return None  # a client outside any repository: nothing to coordinate
        try:
            pattern, root = located_link(path, places[0], cwd) or located(path, places[0], cwd, literal=True)
        except LockstepError:
            return None  # outside the repository (or a name no repository file can have)
        if ".git" in pattern.split("/"):
            return None  # git's own files (.git/config, a worktree's .git file): no content of the repository
        if pattern == "**" or pattern.endswith("/"):
            # A folder: its files were listed (``_folders_as_files``) or said to be too many;
            # one that does not exist (`rm -rf build/`, `mkdir -p new/`) holds none.  Asked
            # for, it made the coordinator refuse the whole intent, held files and all.
            return None
        check_own_worktree(path, pattern, root, places[0])
        # A name with a control character is refused by the coordinator: asking for it
        # would leave the call's other files uncoordinated too.
        return None if CONTROL_CHARACTER.search(pattern) else pattern

    return resolve


def _with_link_targets(paths: list[str], cwd: str) -> list[str]:
    """The paths, and after each link to a file what it points to: ``echo x > link``
    writes that file, ``rm link`` the link (both are asked for)."""
    found: list[str] = []
    for path in paths:
        found.append(path)
        full = os.path.join(cwd, path)
        try:
            if os.path.islink(full) and not os.path.isdir(full):
                found.append(os.path.realpath(full))
        except (OSError, ValueError):  # a name the system refuses: the resolver says so
            pass
    return found


def _decider(client: str, event: dict, endpoint: str | None) -> Decide:
    def decide(patterns: list[str], maybe: list[str]) -> tuple[str, str]:
        from agents.oneshot import open_oneshot

        with open_oneshot(agent_for(client, event), cwd=str(event.get("cwd") or os.getcwd()), endpoint=endpoint) as session:
            decision = session.intent(patterns, maybe=maybe)
            context = ""
            if decision.inbox:  # something waits for the agent: shown with this answer
                from agents.inbox import fetch

                context = fetch(session, CLIENT_EVENTS[client])
        return decision.verdict, decision.reason, context

    return decide
