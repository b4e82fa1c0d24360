"""agents.hook_install: merging Lockstep's hooks into a client's settings file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agents import hook_install
from agents.hook_install import CLIENTS, apply, plan, settings_path
from protocol.errors import UsageError

COMMAND = "lockstep hook {client}"


def _install(client: str, path: Path, uninstall: bool = False) -> hook_install.Change:
    change = plan(client, path, command=COMMAND.format(client=client), uninstall=uninstall)
    apply(change)
    return change


def _ours(settings: dict, client: str) -> dict[str, list[str | None]]:
    found: dict[str, list] = {}
    for event, groups in settings.get("hooks", {}).items():
        for group in groups:
            for hook in group.get("hooks", []):
                if hook.get("command") == COMMAND.format(client=client):
                    found.setdefault(event, []).append(group.get("matcher"))
    return found


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_install_into_a_missing_file_then_idempotent_then_uninstall(tmp_path: Path, client: str) -> None:
    path = settings_path(client, "project", tmp_path)
    first = _install(client, path)
    assert first.before is None and first.changed
    settings = json.loads(path.read_text())
    assert set(_ours(settings, client)) == set(CLIENTS[client]["events"])
    assert all(len(matchers) == 1 for matchers in _ours(settings, client).values())
    text = path.read_text()
    second = _install(client, path)
    assert not second.changed and path.read_text() == text
    removed = _install(client, path, uninstall=True)
    assert removed.changed and json.loads(path.read_text()) == {}


def test_merge_keeps_everything_else(tmp_path: Path) -> None:
    path = tmp_path / ".claude" / "settings.json"
    path.parent.mkdir()
    original = {
        "model": "opus",
        "permissions": {"allow": ["Bash(npm test)"]},
        "hooks": {
            "PreToolUse": [
                {"matcher": "Bash", "hooks": [{"type": "command", "command": "./audit.sh"}]},
                # a group someone merged by hand: our command beside theirs
                {"matcher": "Write", "hooks": [{"type": "command", "command": "./fmt.sh"}, {"type": "command", "command": "lockstep hook claude"}]},
            ],
            "Notification": [{"hooks": [{"type": "command", "command": "notify-send hi"}]}],
        },
    }
    path.write_text(json.dumps(original, indent=4))
    _install("claude", path)
    settings = json.loads(path.read_text())
    assert settings["model"] == "opus" and settings["permissions"] == original["permissions"]
    assert settings["hooks"]["Notification"] == original["hooks"]["Notification"]
    pre = settings["hooks"]["PreToolUse"]
    assert pre[0] == original["hooks"]["PreToolUse"][0]
    assert pre[1] == {"matcher": "Write", "hooks": [{"type": "command", "command": "./fmt.sh"}]}
    assert len(_ours(settings, "claude")["PreToolUse"]) == 1
    _install("claude", path, uninstall=True)
    after = json.loads(path.read_text())
    assert after["hooks"] == {
        "PreToolUse": [original["hooks"]["PreToolUse"][0], {"matcher": "Write", "hooks": [{"type": "command", "command": "./fmt.sh"}]}],
        "Notification": original["hooks"]["Notification"],
    }
    assert after["model"] == "opus"


def test_an_old_install_is_brought_up_to_date(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    old = {"hooks": {"PreToolUse": [{"matcher": "Write", "hooks": [{"type": "command", "command": '"/usr/bin/python3" -m agents.cli hook claude'}]}]}}
    path.write_text(json.dumps(old))
    _install("claude", path)
    settings = json.loads(path.read_text())
    assert set(_ours(settings, "claude")) == set(CLIENTS["claude"]["events"])
    commands = [h["command"] for groups in settings["hooks"].values() for g in groups for h in g["hooks"]]
    assert not any("/usr/bin/python3" in c for c in commands)


def test_other_clients_hooks_are_not_ours(tmp_path: Path) -> None:
    path = tmp_path / "hooks.json"
    path.write_text(json.dumps({"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "lockstep hook claude"}]}]}}))
    _install("codex", path, uninstall=True)
    assert "hook claude" in path.read_text()


def test_dry_run_diff_and_no_write(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text("{}\n")
    change = plan("gemini", path, command="lockstep hook gemini")
    assert "+" in change.diff() and "BeforeTool" in change.diff()
    assert set(json.loads(change.after)["hooks"]) == {"BeforeTool", "AfterTool", "BeforeAgent", "AfterAgent"}
    assert path.read_text() == "{}\n"
    gemini_hook = json.loads(change.after)["hooks"]["BeforeTool"][0]
    assert gemini_hook["matcher"] == "write_file|replace|run_shell_command|edit_file|create_file|move_file|.*__(write_file|edit_file|create_file|move_file)"
    assert gemini_hook["hooks"][0]["name"] == "lockstep" and gemini_hook["hooks"][0]["timeout"] == 30_000


@pytest.mark.parametrize(
    "text",
    [
        "not json", "[1, 2]", '{"hooks": []}',
        # each was a traceback (exit 1), or a file the client could no longer read
        '{"hooks": {"PreToolUse": {}}}',  # 'dict' object has no attribute 'append'
        "\udcff\udcfe{}",  # bytes that are not UTF-8: UnicodeDecodeError
        '{"a": 1e400}', '{"a": NaN}',  # written back as Infinity / NaN, which is not JSON
    ],
)
def test_a_file_it_cannot_read_is_refused_not_overwritten(tmp_path: Path, text: str) -> None:
    path = tmp_path / "settings.json"
    data = text.encode("utf-8", "surrogateescape")
    path.write_bytes(data)
    with pytest.raises(UsageError) as refused:
        plan("claude", path)
    assert "fix it by hand" in str(refused.value) and "\n" not in str(refused.value)
    assert path.read_bytes() == data


def test_unknown_client_and_paths(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="claude, codex, gemini"):
        settings_path("cursor", "project", tmp_path)
    assert settings_path("codex", "user", tmp_path, home=tmp_path / "home") == tmp_path / "home" / ".codex" / "hooks.json"
    assert settings_path("gemini", "project", tmp_path) == tmp_path / ".gemini" / "settings.json"


def test_uninstall_from_a_missing_file_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / ".claude" / "settings.json"
    change = _install("claude", path, uninstall=True)
    assert not change.changed and not path.exists()


def test_a_settings_file_that_is_a_symlink_is_changed_where_it_points(tmp_path: Path) -> None:
    # the link was replaced by a copy: the dotfiles repository it pointed into kept the old settings
    dotfiles = tmp_path / "dotfiles" / "settings.json"
    dotfiles.parent.mkdir()
    dotfiles.write_text('{"theme": "dark"}\n')
    link = tmp_path / ".claude" / "settings.json"
    link.parent.mkdir()
    link.symlink_to(dotfiles)
    _install("claude", link)
    assert link.is_symlink() and link.resolve() == dotfiles
    assert json.loads(dotfiles.read_text())["theme"] == "dark" and _ours(json.loads(dotfiles.read_text()), "claude")
    assert sorted(p.name for p in dotfiles.parent.iterdir()) == ["settings.json"]  # no temporary left
