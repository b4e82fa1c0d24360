"""The MCP server's JSON-RPC handling (pure: the tools are stubbed)."""

from __future__ import annotations

import io
import json

from agents import mcp


def _call(name, args=None, ident=7):
    return {"jsonrpc": "2.0", "id": ident, "method": "tools/call", "params": {"name": name, "arguments": args or {}}}


def test_tool_results_are_text_with_is_error():
    response = mcp.handle(_call("claim", {"paths": ["a"]}), lambda name, args: ({"granted": False}, True))
    assert response["id"] == 7 and response["result"]["isError"] is True
    assert json.loads(response["result"]["content"][0]["text"]) == {"granted": False}


def test_protocol_errors_for_malformed_calls_and_silence_for_notifications():
    never = lambda *a: (_ for _ in ()).throw(AssertionError("no tool should run"))  # noqa: E731
    assert mcp.handle({"jsonrpc": "2.0", "method": "notifications/initialized"}, never) is None
    assert mcp.handle({"jsonrpc": "2.0", "id": 1, "method": "resources/list"}, never)["error"]["code"] == -32601
    assert mcp.handle(_call("rm_rf"), never)["error"]["code"] == -32602
    assert mcp.handle({"id": 1, "method": "ping"}, never)["error"]["code"] == -32600
    assert mcp.handle({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "claim", "arguments": [1]}}, never)["error"]["code"] == -32602


def test_serve_answers_line_by_line_and_reports_parse_errors():
    out = io.StringIO()
    mcp.serve(io.StringIO('{"jsonrpc": "2.0", "id": 1, "method": "ping"}\n\nnot json\n'), out, lambda *a: ({}, False))
    first, second = map(json.loads, out.getvalue().splitlines())
    assert first == {"jsonrpc": "2.0", "id": 1, "result": {}}
    assert second["error"]["code"] == -32700


def test_every_tool_has_a_schema_and_a_description():
    for tool in mcp.TOOLS:
        assert tool["description"] and tool["inputSchema"]["type"] == "object"
