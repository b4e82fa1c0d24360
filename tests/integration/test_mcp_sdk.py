"""The MCP server driven by the official MCP Python SDK's client, over stdio, against a
real coordinator: what an MCP host (Claude Code, an IDE) does when it calls our tools."""

from __future__ import annotations

import json
import subprocess
import sys

import anyio
from mcp import Client, StdioServerParameters  # the official SDK: in the test extra

from tests.integration.conftest import LOCKSTEP, cli, env_for, holders

FAST = ("--heartbeat", "0.2", "--liveness", "3")


def _sdk_session(repo_dir, body, mode="auto"):
    """Run ``body(client)`` with an SDK client connected to ``lockstep mcp`` in ``repo_dir``."""
    server = StdioServerParameters(
        command=sys.executable, args=["-m", "agents.cli", "mcp", "--agent", "mcpbot"], cwd=str(repo_dir), env=env_for()
    )

    async def main():
        with anyio.fail_after(60):
            async with Client(server, mode=mode, read_timeout_seconds=30) as client:
                return await body(client)

    return anyio.run(main)


def test_the_sdk_client_negotiates_lists_and_calls_tools(repo, coordinator):
    coordinator(*FAST)
    assert cli("claim", "src/", "--agent", "alice", cwd=repo.root).rc == 0

    async def body(client):
        tools = {t.name: t for t in (await client.list_tools()).tools}
        refused = await client.call_tool("claim", {"paths": ["src/app.py"]})
        allowed = await client.call_tool("intent", {"paths": ["docs/x.md"]})  # validated against its outputSchema by the SDK
        return client.protocol_version, tools, refused, allowed

    for mode in ("auto", "legacy"):  # auto probes server/discover first and falls back to initialize
        version, tools, refused, allowed = _sdk_session(repo.other, body, mode)
        assert version == "2025-11-25"
        assert set(tools) >= {"claim", "release", "intent", "status", "verify", "done"}
        assert all(t.output_schema and t.input_schema["type"] == "object" for t in tools.values())
        assert refused.is_error and refused.structured_content["conflicts"][0]["holder"] == "alice"
        assert not allowed.is_error and allowed.structured_content["verdict"] == "allow"
        assert json.loads(allowed.content[0].text) == allowed.structured_content
        cli("release", "--all", "--agent", "mcpbot", cwd=repo.other)


def test_a_wrong_argument_type_claims_nothing(repo, coordinator):
    coordinator(*FAST)

    async def body(client):
        return [await client.call_tool("claim", args) for args in ({"paths": "."}, {"paths": "qq"}, {"paths": ["src/app.py"], "ttl": "1h"})]

    for result in _sdk_session(repo.other, body):
        assert result.is_error
        error = result.structured_content["error"]
        assert error["code"] == "bad_request" and error["field"] in ("paths", "ttl") and error["field"] in result.content[0].text
    assert holders(repo) == {}  # neither the worktree ('.') nor 'q' was claimed


def test_an_unknown_protocol_version_is_answered_with_one_we_speak(repo, coordinator):
    coordinator(*FAST)
    calls = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2099-01-01", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "status", "arguments": {}}},
        {"jsonrpc": "2.0", "id": 3, "method": "initialize", "params": {"protocolVersion": "2024-11-05", "capabilities": {}}},
        {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": "status", "arguments": {}}},
    ]
    proc = subprocess.run([*LOCKSTEP, "mcp", "--agent", "mcpbot"], input="".join(json.dumps(c) + "\n" for c in calls),
                          cwd=repo.other, env=env_for(), capture_output=True, text=True, timeout=60)
    replies = {r["id"]: r["result"] for r in map(json.loads, proc.stdout.splitlines())}
    assert replies[1]["protocolVersion"] == "2025-11-25"
    assert replies[2]["structuredContent"]["mode"] and not replies[2]["isError"]
    assert replies[3]["protocolVersion"] == "2024-11-05" and "structuredContent" not in replies[4]  # a 2024 client gets 2024 results


def test_paths_named_with_glob_characters_are_files_for_intent_and_literal_claims(repo, coordinator):
    coordinator(*FAST)
    assert cli("claim", "--literal", "app/[slug]/page.tsx", "--agent", "alice", cwd=repo.root).rc == 0

    async def body(client):
        intent = await client.call_tool("intent", {"paths": ["app/[slug]/page.tsx"]})
        claim = await client.call_tool("claim", {"paths": ["lib/[id].ts"], "literal": True})
        return intent, claim

    intent, claim = _sdk_session(repo.other, body)
    assert intent.is_error and intent.structured_content["verdict"] == "block" and intent.structured_content["holders"] == ["alice"]
    assert not claim.is_error and claim.structured_content["patterns"] == ["lib/\\[id].ts"]
    assert holders(repo)["lib/\\[id].ts"] == "mcpbot"
