"""The MCP server's JSON-RPC handling (pure: the tools are stubbed)."""

from __future__ import annotations

import io
import json

from hypothesis import given, settings
from hypothesis import strategies as st

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


def test_a_request_id_that_is_not_a_string_or_a_finite_number_is_an_invalid_request():
    # an id of 1e400 was echoed as Infinity: the reply line was not JSON
    out = io.StringIO()
    lines = [f'{{"jsonrpc": "2.0", "id": {ident}, "method": "ping"}}' for ident in ("1e400", "-1e400", "true", '{"a": 1}', "[1]", '"x"', "2.5")]
    mcp.serve(io.StringIO("\n".join(lines) + "\n"), out, NEVER)
    replies = [json.loads(line, parse_constant=mcp._not_json) for line in out.getvalue().splitlines()]
    assert [r.get("error", {}).get("code") for r in replies] == [-32600] * 5 + [None, None]
    assert [r["id"] for r in replies] == [None] * 5 + ["x", 2.5]


def test_serve_answers_line_by_line_and_reports_parse_errors():
    out = io.StringIO()
    mcp.serve(io.StringIO('{"jsonrpc": "2.0", "id": 1, "method": "ping"}\n\nnot json\n'), out, lambda *a: ({}, False))
    first, second = map(json.loads, out.getvalue().splitlines())
    assert first == {"jsonrpc": "2.0", "id": 1, "result": {}}
    assert second["error"]["code"] == -32700


def test_every_tool_has_a_schema_and_a_description():
    for tool in mcp.TOOLS:
        assert tool["description"] and tool["inputSchema"]["type"] == "object"


# ---------------------------------------------------------------------- to the letter

NEVER = lambda *a: (_ for _ in ()).throw(AssertionError("no tool should run"))  # noqa: E731


def test_a_wrong_argument_type_is_a_tool_error_naming_the_field_and_nothing_runs():
    for args, field in (
        ({"paths": "qq"}, "paths"),  # a string where an array is required (it used to claim q)
        ({"paths": ["."], "shared": "yes"}, "shared"),
        ({"paths": [3]}, "paths[0]"),
        ({"paths": []}, "paths"),
        ({}, "paths"),
        ({"paths": ["a"], "ttl": -1}, "ttl"),
        ({"path": ["a"], "paths": ["a"]}, "path"),  # a misspelt field is named, not ignored
    ):
        result = mcp.handle(_call("claim", args), NEVER)["result"]
        assert result["isError"] is True, args
        error = result["structuredContent"]["error"]
        assert error["field"] == field and field in result["content"][0]["text"], (args, error)


def test_an_integer_past_64_bits_is_a_tool_error_and_nothing_runs():
    # it reached the tool, failed to encode on the wire, and the exception ended the server
    for name, args, field in (
        ("intent", {"paths": ["a"], "token": 2**70}, "token"),
        ("intent", {"paths": ["a"], "token": 1e300}, "token"),
        ("take_task", {"id": 2**63}, "id"),
        ("finish_task", {"id": 2**70}, "id"),
    ):
        result = mcp.handle(_call(name, args), NEVER)["result"]
        assert result["isError"] is True and result["structuredContent"]["error"]["field"] == field, (name, args)


def test_a_ttl_under_0_01_s_or_a_token_under_1_is_a_tool_error_and_nothing_runs():
    # the schemas took ttl 5e-324 and token 0, which the coordinator refuses (protocol.messages.MIN_TTL)
    for name, args, field in (
        ("claim", {"paths": ["a"], "ttl": 5e-324}, "ttl"),
        ("claim", {"paths": ["a"], "ttl": 0.009}, "ttl"),
        ("intent", {"paths": ["a"], "token": 0}, "token"),
    ):
        result = mcp.handle(_call(name, args), NEVER)["result"]
        assert result["isError"] is True and result["structuredContent"]["error"]["field"] == field, (name, args)
    seen = []
    mcp.handle(_call("claim", {"paths": ["a"], "ttl": 0.01}), lambda name, args: seen.append(args) or ({}, False))
    assert seen == [{"paths": ["a"], "ttl": 0.01}]


def test_a_lone_surrogate_is_a_tool_error_naming_the_field_and_nothing_runs():
    # JSON's "\\ud800" parses to a str no UTF-8 wire carries: it ended the server in encode
    out = io.StringIO()
    lines = [json.dumps(_call(name, args)) for name, args in (
        ("send", {"to": "bob", "text": "hi \ud800"}), ("finish_task", {"id": 1, "note": "\udfff"}),
        ("land", {"branch": "b\ud800"}), ("claim", {"paths": ["\ud800.py"]}),
    )]
    mcp.serve(io.StringIO("\n".join(lines) + "\n"), out, NEVER)
    fields = [json.loads(line)["result"]["structuredContent"]["error"]["field"] for line in out.getvalue().splitlines()]
    assert fields == ["text", "note", "branch", "paths[0]"]


def test_valid_integers_reach_the_tool_as_ints():
    seen = []
    mcp.handle(_call("intent", {"paths": ["a"], "token": 7.0}), lambda name, args: seen.append(args) or ({}, False))
    assert seen == [{"paths": ["a"], "token": 7}] and type(seen[0]["token"]) is int


def test_initialize_answers_a_supported_version_for_an_unknown_one():
    def initialize(version):
        message = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": version, "capabilities": {}}}
        return mcp.handle(message, NEVER)["result"]["protocolVersion"]

    for known in mcp.SUPPORTED_VERSIONS:
        assert initialize(known) == known
    for unknown in ("1999-01-01", "2099-12-31", "", None, 5):
        assert initialize(unknown) == mcp.PROTOCOL_VERSION


def test_structured_content_and_output_schemas_only_for_clients_that_know_them():
    def conversation(version):
        server = mcp.Server(lambda name, args: ({"released": ["a"]}, False))
        server.handle({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": version}})
        tools = server.handle({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})["result"]["tools"]
        return tools, server.handle(_call("release", {"all": True}))["result"]

    tools, result = conversation("2025-06-18")
    assert all("outputSchema" in t for t in tools)
    assert result["structuredContent"] == json.loads(result["content"][0]["text"]) == {"released": ["a"]}
    tools, result = conversation("2024-11-05")
    assert not any("outputSchema" in t for t in tools) and "structuredContent" not in result


def test_nan_is_not_json():
    out = io.StringIO()
    mcp.serve(io.StringIO('{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "claim", "arguments": {"paths": ["a"], "ttl": NaN}}}\n'), out, NEVER)
    assert json.loads(out.getvalue())["error"]["code"] == -32700


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.floats(-3, 3, allow_nan=False) | st.sampled_from([0.0, 1.0, -1.0]) | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["paths", "shared", "ttl", "all", "token", "x"]), inner, max_size=4),
    max_leaves=8,
)


@settings(max_examples=600, deadline=None)
@given(tool=st.sampled_from(mcp.TOOLS), arguments=st.dictionaries(st.sampled_from(["paths", "shared", "ttl", "all", "token", "x"]), JSON, max_size=3))
def test_argument_checks_agree_with_the_reference_validator(tool, arguments):
    import jsonschema

    reference = jsonschema.Draft202012Validator(tool["inputSchema"])
    assert (mcp.schema_error(tool["inputSchema"], arguments) is None) == reference.is_valid(arguments), arguments


def test_the_schemas_are_valid_json_schema():
    import jsonschema

    for tool in mcp.TOOLS:
        jsonschema.Draft202012Validator.check_schema(tool["inputSchema"])
        jsonschema.Draft202012Validator.check_schema(tool["outputSchema"])


# ---------------------------------------------------------------------- reading lines


def _served(data: bytes, call_tool=NEVER) -> list[dict]:
    out = io.StringIO()
    mcp.serve(io.BytesIO(data), out, call_tool)
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_a_line_past_the_cap_is_one_invalid_request_and_the_next_lines_are_served(monkeypatch):
    monkeypatch.setattr(mcp, "MAX_LINE_BYTES", 64)
    ping = b'{"jsonrpc":"2.0","id":1,"method":"ping"}'
    at_cap = ping + b" " * (64 - len(ping))  # exactly the cap: still a message
    replies = _served(b"x" * 1000 + b"\n" + at_cap + b"\n" + at_cap + b" \n" + ping + b"\n" + b"y" * 65)
    assert [r.get("error", {}).get("code") for r in replies] == [-32600, None, -32600, None, -32600]
    assert [r["id"] for r in replies] == [None, 1, None, 1, None]
    assert "longer than 64 bytes" in replies[0]["error"]["message"]


def test_a_line_that_is_not_utf8_is_a_parse_error_and_the_next_line_is_served():
    replies = _served(b'\xff{"jsonrpc":"2.0","id":1,"method":"ping"}\n{"jsonrpc":"2.0","id":2,"method":"ping"}\n')
    assert replies[0]["error"]["code"] == -32700 and "not UTF-8" in replies[0]["error"]["message"]
    assert replies[1] == {"jsonrpc": "2.0", "id": 2, "result": {}}


def test_a_request_with_a_null_id_is_answered_invalid_not_taken_for_a_notification():
    # it was silent: a client waiting for the answer to id null waited forever
    replies = _served(b'{"jsonrpc":"2.0","id":null,"method":"ping"}\n{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
    assert len(replies) == 1 and replies[0]["id"] is None and replies[0]["error"]["code"] == -32600


def test_an_invalid_request_echoes_only_an_id_that_is_one():
    # {"id": 1e400} with no "jsonrpc" was echoed as Infinity: the reply was not JSON
    out = io.StringIO()
    mcp.serve(io.BytesIO(b'{"id":1e400,"method":"ping"}\n{"id":[1],"method":"ping"}\n{"id":3,"method":"ping"}\n'), out, NEVER)
    replies = [json.loads(line, parse_constant=mcp._not_json) for line in out.getvalue().splitlines()]
    assert [r["id"] for r in replies] == [None, None, 3]
    assert {r["error"]["code"] for r in replies} == {-32600}


def test_a_batch_is_answered_with_one_array_in_order_and_notifications_get_nothing():
    # a batch (which 2025-03-26 clients may send) was one "invalid request" for all its members
    batch = [
        {"jsonrpc": "2.0", "id": 1, "method": "ping"},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        _call("release", {"all": True}, ident="two"),
        {"jsonrpc": "2.0", "id": 3, "method": "nope"},
        5,
    ]
    lines = [json.dumps(batch), "[]", json.dumps([{"jsonrpc": "2.0", "method": "notifications/initialized"}]), json.dumps({"jsonrpc": "2.0", "id": 4, "method": "ping"})]
    replies = _served(("\n".join(lines) + "\n").encode(), lambda name, args: ({"released": []}, False))
    answered, empty, after = replies
    assert [r["id"] for r in answered] == [1, "two", 3, None]
    assert answered[0]["result"] == {} and answered[1]["result"]["isError"] is False
    assert answered[2]["error"]["code"] == -32601 and answered[3]["error"]["code"] == -32600
    assert empty["error"]["code"] == -32600 and "empty batch" in empty["error"]["message"]
    assert after == {"jsonrpc": "2.0", "id": 4, "result": {}}  # the all-notification batch got no line


def test_a_tool_that_fails_unexpectedly_is_that_requests_internal_error_and_the_server_goes_on(capsys):
    def broken(name, args):
        raise OSError("the disk went away")

    replies = _served((json.dumps(_call("status", ident=1)) + '\n{"jsonrpc":"2.0","id":2,"method":"ping"}\n').encode(), broken)
    assert replies[0]["id"] == 1 and replies[0]["error"]["code"] == -32603
    assert "OSError: the disk went away" in replies[0]["error"]["message"]
    assert replies[1] == {"jsonrpc": "2.0", "id": 2, "result": {}}
    assert capsys.readouterr().err.count("\n") == 1  # one line, no traceback


def test_a_number_of_thousands_of_digits_is_a_parse_error_saying_so():
    # the message told the client to call sys.set_int_max_str_digits()
    replies = _served(b'{"jsonrpc":"2.0","id":' + b"9" * 5000 + b',"method":"ping"}\n{"jsonrpc":"2.0","id":2,"method":"ping"}\n')
    assert replies[0]["error"] == {"code": -32700, "message": "parse error: a number of more than 4300 digits"}
    assert replies[1] == {"jsonrpc": "2.0", "id": 2, "result": {}}
