"""An MCP server (stdio) exposing Lockstep's verbs as tools.

The Model Context Protocol over stdio is JSON-RPC 2.0, one message per line.  We answer
``initialize``, ``ping``, ``tools/list`` and ``tools/call``; notifications get no answer.
A tool's result is its JSON as text, with ``isError`` set when the coordinator refused
or blocked (so the model sees why), never a protocol error: those are for malformed
calls.  The tools act as one agent (``--agent`` or ``LOCKSTEP_AGENT``), with paths
relative to the server's working directory, exactly as the CLI does.
"""

from __future__ import annotations

import json
from typing import Any, Callable, TextIO

PROTOCOL_VERSION = "2024-11-05"

_PATHS = {"type": "array", "items": {"type": "string"}, "description": "files, folders (dir/) or globs (src/**/*.py), relative to the worktree"}

TOOLS: list[dict[str, Any]] = [
    {
        "name": "claim",
        "description": "Claim files, folders or globs before working on them. Refused (isError) when another live agent holds them: the holders are named.",
        "inputSchema": {"type": "object", "properties": {"paths": _PATHS, "shared": {"type": "boolean"}, "ttl": {"type": "number", "description": "seconds"}}, "required": ["paths"]},
    },
    {
        "name": "release",
        "description": "Release your claims on paths (as claimed), or all of them.",
        "inputSchema": {"type": "object", "properties": {"paths": _PATHS, "all": {"type": "boolean"}}},
    },
    {
        "name": "intent",
        "description": "Ask before writing concrete files: allow, warn or block (isError). An allowed write to an unclaimed file claims it for you.",
        "inputSchema": {"type": "object", "properties": {"paths": _PATHS, "token": {"type": "integer"}}, "required": ["paths"]},
    },
    {
        "name": "status",
        "description": "Agents (alive/stale/gone) and live claims of this repository.",
        "inputSchema": {"type": "object", "properties": {}},
    },
    {
        "name": "verify",
        "description": "Run the project's verify suite; each check's verdict, duration and errors-first output.",
        "inputSchema": {"type": "object", "properties": {}},
    },
    {
        "name": "done",
        "description": "Declare your goal finished: passes only after a passing verify run that started after your last write.",
        "inputSchema": {"type": "object", "properties": {}},
    },
    {
        "name": "land",
        "description": (
            "Land your branch on the integration branch through the merge queue: merged in memory, checked on the merged tree, "
            "then the branch moves. Waits for the verdict: landed, or (isError) conflict with the hunks and the other agent, "
            "failed with the failing checks, stale, blocked, each saying what to fix."
        ),
        "inputSchema": {"type": "object", "properties": {"branch": {"type": "string", "description": "default: your worktree's branch"}}},
    },
]

CallTool = Callable[[str, dict], tuple[Any, bool]]  # -> (result, is_error)


def handle(message: Any, call_tool: CallTool) -> dict | None:
    """One JSON-RPC message in, its response out (None for notifications)."""
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0" or "method" not in message:
        return _error(message.get("id") if isinstance(message, dict) else None, -32600, "invalid request")
    method, ident = message["method"], message.get("id")
    if ident is None:
        return None  # a notification (initialized, cancelled, ...)
    params = message.get("params") or {}
    if method == "initialize":
        return _result(ident, {
            "protocolVersion": params.get("protocolVersion", PROTOCOL_VERSION),
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "lockstep", "version": _version()},
        })
    if method == "ping":
        return _result(ident, {})
    if method == "tools/list":
        return _result(ident, {"tools": TOOLS})
    if method == "tools/call":
        name = params.get("name")
        if name not in {tool["name"] for tool in TOOLS}:
            return _error(ident, -32602, f"unknown tool {name!r}")
        arguments = params.get("arguments") or {}
        if not isinstance(arguments, dict):
            return _error(ident, -32602, "arguments must be an object")
        result, is_error = call_tool(name, arguments)
        return _result(ident, {"content": [{"type": "text", "text": json.dumps(result)}], "isError": is_error})
    return _error(ident, -32601, f"method {method!r} not supported")


def serve(stdin: TextIO, stdout: TextIO, call_tool: CallTool) -> None:
    for line in stdin:
        if not line.strip():
            continue
        try:
            message = json.loads(line)
        except ValueError as exc:
            response = _error(None, -32700, f"parse error: {exc}")
        else:
            response = handle(message, call_tool)
        if response is not None:
            stdout.write(json.dumps(response) + "\n")
            stdout.flush()


def _result(ident: Any, result: dict) -> dict:
    return {"jsonrpc": "2.0", "id": ident, "result": result}


def _error(ident: Any, code: int, message: str) -> dict:
    return {"jsonrpc": "2.0", "id": ident, "error": {"code": code, "message": message}}


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("lockstep")
    except PackageNotFoundError:
        return "0.0.0+source"
