"""Input nested without end, from every outside source a person or an agent controls:
a hook's stdin, an MCP line, lockstep.toml, a settings file, a command-line value.

Python's ``json`` and ``tomllib`` (and msgspec) raise ``RecursionError`` on a few KB of
``[[[[...``, which none of their callers expected: each of these printed a traceback
and exited 1 (a hook's exit 1 is ignored by the agent CLIs: the write went on with no
word).  Now each gets its one-line error and its documented exit code, and a
coordinator that is running keeps deciding.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from .conftest import LOCKSTEP, cli, env_for, status

DEEP_JSON = "[" * 100_000 + "]" * 100_000
DEEP_TOML = "[coordinator]\nmode = " + "[" * 5_000 + "]" * 5_000 + "\n"


def _run(args: list[str], stdin: str, cwd, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*LOCKSTEP, *args], input=stdin, cwd=cwd, env=env_for(env), capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("client", ["claude", "codex", "gemini"])
def test_a_hook_given_deeply_nested_json_answers_with_its_warning_or_its_denial(repo, coordinator, client):
    coordinator()
    for flags, denied in (((), False), (("--fail-closed",), True)):
        answer = _run(["hook", client, *flags], DEEP_JSON, repo.root, {"LOCKSTEP_AGENT": "alice"})
        assert answer.returncode == 0, answer.stderr
        assert "Traceback" not in answer.stderr
        shown = json.dumps(json.loads(answer.stdout))
        assert "not JSON" in shown and "nested too deeply" in shown
        assert ('"deny"' in shown) == denied
    # The coordinator never saw it, and still decides for the next, well-formed event.
    event = {"hook_event_name": "PreToolUse", "session_id": "s1", "cwd": str(repo.root), "tool_name": "Write",
             "tool_input": {"file_path": str(repo.root / "src" / "app.py"), "content": "x"}}
    assert _run(["hook", "claude"], json.dumps(event), repo.root, {"LOCKSTEP_AGENT": "alice"}).returncode == 0
    assert {c["pattern"]: c["holder"] for c in status(repo)["claims"]} == {"src/app.py": "alice"}


def test_the_mcp_server_answers_a_deeply_nested_line_with_a_parse_error_and_serves_the_next(repo, coordinator):
    coordinator()
    ping = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "ping"})
    served = _run(["mcp"], DEEP_JSON + "\n" + ping + "\n", repo.root, {"LOCKSTEP_AGENT": "alice"})
    assert served.returncode == 0 and "Traceback" not in served.stderr
    first, second = [json.loads(line) for line in served.stdout.splitlines()]
    assert first["error"]["code"] == -32700 and "nested too deeply" in first["error"]["message"]
    assert second == {"jsonrpc": "2.0", "id": 7, "result": {}}


def test_a_deeply_nested_lockstep_toml_is_a_config_error_not_a_traceback(repo):
    (repo.root / "lockstep.toml").write_text(DEEP_TOML)
    served = cli("serve", cwd=repo.root)
    assert served.rc == 2
    assert served.err.strip().splitlines() == [f"lockstep: {repo.root / 'lockstep.toml'}: invalid TOML: arrays or tables nested too deeply"]


def test_hook_install_over_a_deeply_nested_settings_file_says_to_fix_it(repo):
    settings = repo.root / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text('{"a":' * 5_000 + "1" + "}" * 5_000)
    installed = cli("hook", "install", "claude", cwd=repo.root)
    assert installed.rc == 2 and "Traceback" not in installed.err
    assert "is not valid JSON (nested too deeply)" in installed.err
    assert settings.read_text().startswith('{"a":{"a":')  # left as it was
