"""An MCP server (stdio) exposing Lockstep's verbs as tools.

The Model Context Protocol over stdio is JSON-RPC 2.0, one message per line.  We answer
``initialize``, ``ping``, ``tools/list`` and ``tools/call``; notifications get no answer.
A batch (an array, which 2025-03-26 clients may send) gets one array of the answers.

* ``initialize`` answers the client's protocol version when we speak it, else the newest
  one we do (the client then decides whether it can go on), as the lifecycle requires.
* A tool's arguments are checked against its ``inputSchema`` before anything runs: a
  wrong type, a missing or an unknown field is a tool error (``isError``) naming the
  field, so the model can correct the call (the spec's "input validation errors are tool
  execution errors"); nothing is claimed.
* A tool's result is its JSON as text and, for clients of 2025-06-18 or later, the same
  object as ``structuredContent`` (each tool declares its ``outputSchema``).  ``isError``
  is set when the coordinator refused or blocked (so the model sees why), never a
  protocol error: those are for malformed calls.

The tools act as one agent (``--agent`` or ``LOCKSTEP_AGENT``), with paths relative to
the server's working directory, exactly as the CLI does.  The server is our own small
one (no runtime dependency); the test suite drives it with the official MCP Python SDK's
client over stdio.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Any, BinaryIO, Callable, Iterator, NamedTuple, TextIO

from protocol import jsontext
from protocol.messages import MIN_TTL

# Newest first: the versions of the initialize handshake this server speaks.
SUPPORTED_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
PROTOCOL_VERSION = SUPPORTED_VERSIONS[0]
STRUCTURED_SINCE = "2025-06-18"  # structuredContent and outputSchema appeared in this revision
# The longest line read: four times the wire's cap (a tool call's JSON, escapes and all,
# becomes one coordinator message); longer is refused without being held whole.
MAX_LINE_BYTES = 1024 * 1024

_PATHS = {
    "type": "array",
    "items": {"type": "string", "minLength": 1},
    "minItems": 1,
    "description": "files, folders (dir/) or globs (src/**/*.py), relative to the worktree",
}
_FILES = {
    "type": "array",
    "items": {"type": "string", "minLength": 1},
    "minItems": 1,
    "description": "concrete files, relative to the worktree, named as they are: [, * and ? are part of a name",
}
_LITERAL = {"type": "boolean", "description": "each path is one file or folder named as written: [, * and ? are not globs"}
_STRINGS = {"type": "array", "items": {"type": "string"}}
_INT64_MAX = 2**63 - 1  # the largest integer the wire carries: a larger one failed to encode and ended the server
_GATE = {
    "type": "object",
    "properties": {
        "subject": {"type": "string"},
        "verdict": {"type": "string"},
        "reason": {"type": "string"},
        "job": {"type": "string"},
        "results": {"type": "array"},
    },
    "required": ["subject", "verdict", "reason"],
}


def _arguments(properties: dict, required: tuple[str, ...] = ()) -> dict:
    schema: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = list(required)
    return schema


TOOLS: list[dict[str, Any]] = [
    {
        "name": "claim",
        "description": "Claim files, folders or globs before working on them. Refused (isError) when another live agent holds them: the holders are named.",
        "inputSchema": _arguments({"paths": _PATHS, "shared": {"type": "boolean"}, "ttl": {"type": "number", "minimum": MIN_TTL, "description": f"seconds (at least {MIN_TTL:g})"}, "literal": _LITERAL}, ("paths",)),
        "outputSchema": {
            "type": "object",
            "properties": {"granted": {"type": "boolean"}, "token": {"type": ["integer", "null"]}, "patterns": _STRINGS, "conflicts": {"type": "array"}, "warnings": {"type": "array"}},
            "required": ["granted", "token", "conflicts", "warnings"],
        },
    },
    {
        "name": "release",
        "description": "Release your claims on paths (as claimed), or all of them.",
        "inputSchema": _arguments({"paths": _PATHS, "all": {"type": "boolean"}, "literal": _LITERAL}),
        "outputSchema": {"type": "object", "properties": {"released": _STRINGS}, "required": ["released"]},
    },
    {
        "name": "intent",
        "description": "Ask before writing concrete files: allow, warn or block (isError). An allowed write to an unclaimed file claims it for you.",
        "inputSchema": _arguments({"paths": _FILES, "token": {"type": "integer", "minimum": 1, "maximum": _INT64_MAX}}, ("paths",)),
        "outputSchema": {
            "type": "object",
            "properties": {
                "verdict": {"enum": ["allow", "warn", "block"]},
                "reason": {"type": "string"},
                "paths": _STRINGS,
                "token": {"type": ["integer", "null"]},
                "holders": _STRINGS,
                "conflicts": {"type": "array"},
            },
            "required": ["verdict", "reason", "paths"],
        },
    },
    {
        "name": "status",
        "description": "Agents (alive/stale/gone) and live claims of this repository.",
        "inputSchema": _arguments({}),
        "outputSchema": {
            "type": "object",
            "properties": {"mode": {"type": "string"}, "agents": {"type": "array"}, "claims": {"type": "array"}},
            "required": ["mode", "agents", "claims"],
        },
    },
    {
        "name": "verify",
        "description": "Run the project's verify suite; each check's verdict, duration and errors-first output.",
        "inputSchema": _arguments({}),
        "outputSchema": _GATE,
    },
    {
        "name": "done",
        "description": "Declare your goal finished: passes only when a verify run passed on the worktree's current content.",
        "inputSchema": _arguments({}),
        "outputSchema": _GATE,
    },
    {
        "name": "land",
        "description": (
            "Land your branch on the integration branch through the merge queue: merged in memory, checked on the merged tree, "
            "then the branch moves. Waits for the verdict: landed, or (isError) conflict with the hunks and the other agent, "
            "failed with the failing checks, stale, blocked, each saying what to fix."
        ),
        "inputSchema": _arguments({"branch": {"type": "string", "minLength": 1, "description": "default: your worktree's branch"}}),
        "outputSchema": {
            "type": "object",
            "properties": {
                "job": {"type": "string"},
                "branch": {"type": "string"},
                "target": {"type": "string"},
                "stage": {"type": "string"},
                "verdict": {"enum": ["", "landed", "conflict", "failed", "stale", "blocked"]},
                "reason": {"type": "string"},
                "commit": {"type": "string"},
                "changed": _STRINGS,
                "conflicts": {"type": "array"},
                "results": {"type": "array"},
            },
            "required": ["job", "verdict", "reason"],
        },
    },
    {
        "name": "tasks",
        "description": "Open tasks for you and for anyone (queued by rules or people): id, task, state, who took it, and why it was queued.",
        "inputSchema": _arguments({"all": {"type": "boolean", "description": "finished tasks too"}}),
        "outputSchema": {"type": "object", "properties": {"tasks": {"type": "array"}, "message": {"type": "string"}}, "required": ["tasks"]},
    },
    {
        "name": "take_task",
        "description": "Take task `id`: it is yours to do. Refused (isError) when another agent took it or it is done.",
        "inputSchema": _arguments({"id": {"type": "integer", "minimum": 1, "maximum": _INT64_MAX}}, ("id",)),
        "outputSchema": {"type": "object", "properties": {"tasks": {"type": "array"}, "message": {"type": "string"}}, "required": ["tasks", "message"]},
    },
    {
        "name": "finish_task",
        "description": "Mark task `id` done (yours, or one nobody took), with an optional note.",
        "inputSchema": _arguments({"id": {"type": "integer", "minimum": 1, "maximum": _INT64_MAX}, "note": {"type": "string"}}, ("id",)),
        "outputSchema": {"type": "object", "properties": {"tasks": {"type": "array"}, "message": {"type": "string"}}, "required": ["tasks", "message"]},
    },
    {
        "name": "send",
        "description": "Send a short message to another agent: it is shown to it at its next turn or write, and in its inbox.",
        "inputSchema": _arguments({"to": {"type": "string", "minLength": 1}, "text": {"type": "string", "minLength": 1}}, ("to", "text")),
        "outputSchema": {"type": "object", "properties": {"to": {"type": "string"}, "message": {"type": "string"}}, "required": ["to", "message"]},
    },
    {
        "name": "inbox",
        "description": "Your messages and tasks not shown to you yet (then they count as shown); `all`: recent ones already shown too.",
        "inputSchema": _arguments({"all": {"type": "boolean"}}),
        "outputSchema": {
            "type": "object",
            "properties": {"agent": {"type": "string"}, "messages": {"type": "array"}, "tasks": {"type": "array"}},
            "required": ["agent", "messages", "tasks"],
        },
    },
]
_BY_NAME = {tool["name"]: tool for tool in TOOLS}

CallTool = Callable[[str, dict], tuple[Any, bool]]  # -> (result, is_error)


# ---------------------------------------------------------------------- arguments

_JSON_TYPES: dict[str, Callable[[Any], bool]] = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    # JSON Schema 2020-12: a number with no fractional part is an integer (1.0 too); true is not a number
    "integer": lambda v: not isinstance(v, bool) and (isinstance(v, int) or (isinstance(v, float) and v.is_integer())),
    "number": lambda v: not isinstance(v, bool) and isinstance(v, (int, float)),
}


def _kind(value: Any) -> str:
    for name in ("null", "boolean", "integer", "number", "string", "array", "object"):
        if _JSON_TYPES[name](value):
            return name
    return type(value).__name__


def schema_error(schema: dict, value: Any, where: str = "") -> str | None:
    """The first way ``value`` breaks ``schema`` ("paths: expected array, got string"), or None.

    Covers the JSON Schema keywords our own tool schemas use (type, enum, properties,
    required, additionalProperties, items, minItems, minLength, minimum, maximum,
    exclusiveMinimum), with 2020-12's meaning; the tests hold it to the reference
    validator.  One check of our own: a string must be valid Unicode (JSON's
    ``"\\ud800"`` escape is a lone surrogate, which no UTF-8 wire carries).
    ``where`` names the field ("paths[0]")."""
    field = where or "arguments"
    types = schema.get("type")
    if types is not None:
        allowed = [types] if isinstance(types, str) else list(types)
        if not any(_JSON_TYPES[t](value) for t in allowed):
            return f"{field}: expected {' or '.join(allowed)}, got {_kind(value)}"
    if "enum" in schema and not any(value == v and _kind(value) == _kind(v) for v in schema["enum"]):
        return f"{field}: expected one of {', '.join(map(json.dumps, schema['enum']))}"
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        for name in schema.get("required", ()):
            if name not in value:
                return f"{_join(where, name)}: required"
        if schema.get("additionalProperties") is False:
            unknown = sorted(k for k in value if k not in properties)
            if unknown:
                return f"{_join(where, unknown[0])}: unknown field (expected {', '.join(properties) or 'no arguments'})"
        for name, sub in properties.items():
            if name in value:
                problem = schema_error(sub, value[name], _join(where, name))
                if problem:
                    return problem
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            return f"{field}: expected at least {schema['minItems']} item(s)"
        if "items" in schema:
            for i, item in enumerate(value):
                problem = schema_error(schema["items"], item, f"{field}[{i}]")
                if problem:
                    return problem
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            return f"{field}: expected at least {schema['minLength']} character(s)"
        if not _unicode(value):
            return f"{field}: not valid Unicode (a lone surrogate such as \\ud800)"
    if _JSON_TYPES["number"](value):
        if "minimum" in schema and value < schema["minimum"]:
            return f"{field}: expected at least {schema['minimum']}"
        if "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
            return f"{field}: expected more than {schema['exclusiveMinimum']}"
        if "maximum" in schema and value > schema["maximum"]:
            return f"{field}: expected at most {schema['maximum']}"
    return None


def _unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _integers(schema: dict, arguments: dict) -> dict:
    """Valid arguments with integers as ints (JSON Schema counts 3.0 as an integer)."""
    properties = schema.get("properties", {})
    return {
        k: int(v) if isinstance(v, float) and properties.get(k, {}).get("type") == "integer" else v
        for k, v in arguments.items()
    }


def _join(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


# ---------------------------------------------------------------------- JSON-RPC


class Server:
    """One client's conversation: remembers the protocol version agreed at initialize."""

    def __init__(self, call_tool: CallTool) -> None:
        self.call_tool = call_tool
        self.version = PROTOCOL_VERSION  # until initialize says otherwise

    @property
    def structured(self) -> bool:
        return self.version >= STRUCTURED_SINCE  # the revisions are dates: they sort as strings

    def answer(self, message: Any) -> dict | None:
        """``handle``, where a failure of ours (a bug, an error no tool expected) is the
        request's -32603 and one line on stderr: the server goes on with the next."""
        try:
            return self.handle(message)
        except Exception as exc:  # noqa: BLE001 - one request fails, not the conversation
            ident = message.get("id") if isinstance(message, dict) else None
            ident = ident if _valid_id(ident) else None
            print(f"lockstep mcp: request {json.dumps(ident)} failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            return _error(ident, -32603, f"internal error: {type(exc).__name__}: {exc}")

    def handle(self, message: Any) -> dict | None:
        """One JSON-RPC message in, its response out (None for notifications)."""
        ident = message.get("id") if isinstance(message, dict) else None
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0" or not isinstance(message.get("method"), str):
            # echoed only when it is an id: 1e400 would print Infinity, which is not JSON
            return _error(ident if _valid_id(ident) else None, -32600, 'invalid request: expected an object with "jsonrpc": "2.0" and a "method" string')
        method = message["method"]
        if "id" not in message:
            return None  # a notification (initialized, cancelled, ...)
        if not _valid_id(ident):  # null too: MCP's requests have ids, and a silence would leave the client waiting
            return _error(None, -32600, "invalid request: id must be a string or a number")
        params = message.get("params")
        if params is None:
            params = {}
        if not isinstance(params, dict):
            return _error(ident, -32602, "params must be an object")
        if method == "initialize":
            asked = params.get("protocolVersion")
            self.version = asked if asked in SUPPORTED_VERSIONS else PROTOCOL_VERSION
            return _result(ident, {
                "protocolVersion": self.version,
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "lockstep", "version": _version()},
            })
        if method == "ping":
            return _result(ident, {})
        if method == "tools/list":
            fields = ("name", "description", "inputSchema") + (("outputSchema",) if self.structured else ())
            return _result(ident, {"tools": [{k: tool[k] for k in fields} for tool in TOOLS]})
        if method == "tools/call":
            return self._call(ident, params)
        return _error(ident, -32601, f"method {method!r} not supported")

    def _call(self, ident: Any, params: dict) -> dict:
        name = params.get("name")
        tool = _BY_NAME.get(name) if isinstance(name, str) else None
        if tool is None:
            return _error(ident, -32602, f"unknown tool {name!r}")
        arguments = params.get("arguments")
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            return _error(ident, -32602, "arguments must be an object")
        problem = schema_error(tool["inputSchema"], arguments)
        if problem is not None:
            message = f"invalid arguments for {name}: {problem}; nothing was done"
            field = problem.split(":", 1)[0]
            result: Any = {"error": {"code": "bad_request", "message": message, "field": field}}
            is_error = True
        else:
            result, is_error = self.call_tool(name, _integers(tool["inputSchema"], arguments))
        answer: dict[str, Any] = {"content": [{"type": "text", "text": json.dumps(result)}], "isError": is_error}
        if self.structured and isinstance(result, dict):
            answer["structuredContent"] = result
        return _result(ident, answer)


def handle(message: Any, call_tool: CallTool) -> dict | None:
    """One message of a conversation that never said initialize (the newest version)."""
    return Server(call_tool).handle(message)


def serve(stdin: BinaryIO | TextIO, stdout: TextIO, call_tool: CallTool) -> None:
    server = Server(call_tool)
    for line in read_lines(stdin):
        if isinstance(line, Oversized):
            response = _error(None, -32600, f"invalid request: a message longer than {MAX_LINE_BYTES} bytes; nothing was done")
        elif not line.strip():
            continue
        else:
            try:
                text = line.decode() if isinstance(line, bytes) else line  # the transport is UTF-8, only
                message = jsontext.loads(text, parse_constant=_not_json)
            except UnicodeDecodeError as exc:
                response = _error(None, -32700, f"parse error: not UTF-8 ({exc.reason} at byte {exc.start})")
            except ValueError as exc:
                response = _error(None, -32700, f"parse error: {exc}")
            else:
                if isinstance(message, list) and message:
                    _answer_batch(server, message, stdout)
                    continue
                response = server.answer(message) if message != [] else _error(None, -32600, "invalid request: an empty batch")
        if response is not None:
            stdout.write(json.dumps(response) + "\n")
            stdout.flush()


def _answer_batch(server: Server, batch: list, stdout: TextIO) -> None:
    """A JSON-RPC batch (which 2025-03-26 clients may send): one array of the answers,
    on one line, written as they come so that no more than one is held at a time;
    nothing when every member is a notification."""
    started = False
    for message in batch:
        response = server.answer(message)
        if response is not None:
            stdout.write(("," if started else "[") + json.dumps(response))
            started = True
    if started:
        stdout.write("]\n")
        stdout.flush()


class Oversized(NamedTuple):
    """A line past ``MAX_LINE_BYTES``: skipped up to its newline, never held whole."""

    length: int  # how much of it was read before it ended (at least the cap)


def read_lines(stream: BinaryIO | TextIO) -> Iterator[bytes | str | Oversized]:
    """The stream's lines, each read with at most ``MAX_LINE_BYTES`` in memory.

    ``readline(limit)`` stops at the limit: a longer line is read on (and dropped) in
    pieces of the limit until its newline, and stands as one ``Oversized``.  A binary
    stream (``sys.stdin.buffer``) is read as bytes: text that is not UTF-8 is the
    parser's to refuse, for that line alone."""
    stream = getattr(stream, "buffer", stream)
    while True:
        line = stream.readline(MAX_LINE_BYTES + 1)
        if not line:
            return
        if len(line) <= MAX_LINE_BYTES or line[-1:] in ("\n", b"\n"):
            yield line
            continue
        length = len(line)
        while line and line[-1:] not in ("\n", b"\n"):
            line = stream.readline(MAX_LINE_BYTES)
            length += len(line)
        yield Oversized(length)


def _valid_id(ident: Any) -> bool:
    """JSON-RPC's request ids: strings and finite numbers (not true, not objects)."""
    if isinstance(ident, bool):
        return False
    return isinstance(ident, (str, int)) or isinstance(ident, float) and math.isfinite(ident)


def _not_json(constant: str) -> float:
    """NaN and Infinity are Python's extension, not JSON: a parse error."""
    raise ValueError(f"{constant} is not JSON")


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
