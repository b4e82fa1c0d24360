"""agents.toolwrites: the files a client's tool call writes, from the payloads the
clients send (tests/fixtures/hooks), and the answers in each client's format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agents import toolwrites

FIXTURES = Path(__file__).parents[2] / "fixtures" / "hooks"


def _event(client: str, name: str) -> dict:
    return json.loads((FIXTURES / client / name).read_text())


@pytest.mark.parametrize(
    ("client", "name", "expected"),
    [
        ("claude", "pre_tool_use_bash.json", ["/repo/src/main.py"]),
        ("claude", "pre_tool_use_write.json", ["/repo/app/[slug]/page.tsx"]),
        ("claude", "pre_tool_use_edit.json", ["/repo/src/main.py"]),
        ("codex", "pre_tool_use_bash.json", ["/repo/src/main.py"]),
        ("codex", "pre_tool_use_apply_patch.json", ["src/main.py", "app/[slug]/page.tsx", "src/helpers.py", "src/gone.py", "src/util.py"]),
        ("gemini", "before_tool_write_file.json", ["/repo/src/main.py"]),
        ("gemini", "before_tool_replace.json", ["/repo/src/main.py"]),
        ("gemini", "before_tool_shell.json", ["/repo/src/main.py"]),
    ],
)
def test_targets_of_recorded_payloads(client: str, name: str, expected: list[str]) -> None:
    found = toolwrites.targets(client, _event(client, name))
    assert sorted(found.paths) == sorted(expected) and not found.unknown


def test_other_tools_and_odd_input_write_nothing() -> None:
    assert toolwrites.targets("claude", {"tool_name": "Read", "tool_input": {"file_path": "x"}}).paths == []
    assert toolwrites.targets("claude", {"tool_name": "Bash", "tool_input": "rm x"}).unknown
    assert toolwrites.targets("codex", {"tool_name": "apply_patch", "tool_input": {"command": 42}}).unknown
    assert toolwrites.targets("gemini", {"tool_name": "run_shell_command", "tool_input": {"command": ["rm", "x y"], "dir_path": "d"}, "cwd": "/r"}).paths == ["/r/d/x y"]


def test_codex_patches_as_argv_or_given_to_its_shell_are_read_as_patches() -> None:
    """Codex applies ``apply_patch`` itself when it comes as an argv or as a shell call
    (``apply_patch <<'EOF'``): its files are asked for before, like the tool's."""
    envelope = "*** Begin Patch\n*** Update File: app/[slug]/page.tsx\n@@\n-x\n+y\n*** Add File: docs/a b.md\n+hi\n*** End Patch\n"
    argv = {"tool_name": "apply_patch", "tool_input": {"command": ["apply_patch", envelope]}, "cwd": "/r"}
    assert sorted(toolwrites.targets("codex", argv).paths) == ["app/[slug]/page.tsx", "docs/a b.md"]
    heredoc = "apply_patch <<'EOF'\n" + envelope + "EOF\n"
    for command in (heredoc, ["bash", "-lc", heredoc], ["apply_patch", envelope]):
        found = toolwrites.targets("codex", {"tool_name": "Bash", "tool_input": {"command": command}, "cwd": "/r"})
        assert set(found.paths) == {"/r/app/[slug]/page.tsx", "/r/docs/a b.md"}, command


def test_a_folder_a_shell_command_writes_is_the_files_in_it(tmp_path, monkeypatch) -> None:
    """``rm -rf src`` once asked an intent for the folder ``src/``, which the coordinator
    refuses (intents name files): the whole call went uncoordinated, held files and all."""
    (tmp_path / "src" / "sub").mkdir(parents=True)
    (tmp_path / "src" / "a.py").write_text("a")
    (tmp_path / "src" / "sub" / "b.py").write_text("b")
    (tmp_path / "src" / ".git").mkdir()
    (tmp_path / "src" / ".git" / "HEAD").write_text("ref")
    (tmp_path / "link").symlink_to(tmp_path / "src")

    def shell(command: str):
        return toolwrites.targets("claude", {"tool_name": "Bash", "tool_input": {"command": command}, "cwd": str(tmp_path)})

    found = shell("rm -rf src && echo x > notes.txt")
    assert sorted(found.paths) == sorted(str(tmp_path / p) for p in ("src/a.py", "src/sub/b.py", "notes.txt"))
    assert shell("rm link").paths == [str(tmp_path / "link")]  # the link itself, not what it points to
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "c.md").write_text("c")
    monkeypatch.setattr(toolwrites, "MAX_GLOB_MATCHES", 2)
    found = shell("rm -r src docs")  # 3 files in all: the first folder fits, the second is left
    assert sorted(found.paths) == sorted(str(tmp_path / p) for p in ("src/a.py", "src/sub/b.py"))
    assert found.unknown == [f"{tmp_path / 'docs'}: more than 2 files in the folders this call writes: checked after the call"]


def test_a_block_is_denied_in_each_clients_format() -> None:
    for client, name in [("claude", "pre_tool_use_bash.json"), ("codex", "pre_tool_use_apply_patch.json"), ("gemini", "before_tool_shell.json")]:
        asked = []
        answer = toolwrites.before_tool(client, _event(client, name), lambda patterns, maybe: (asked.append(patterns), ("block", "held by alice"))[1], lambda p: p)
        document = json.loads(answer.stdout)
        assert answer.exit_code == 0 and asked
        if client == "gemini":
            assert document == {"decision": "deny", "reason": "lockstep: held by alice"}
        else:
            assert document["hookSpecificOutput"]["permissionDecision"] == "deny"
            assert "alice" in document["hookSpecificOutput"]["permissionDecisionReason"]


def test_a_warning_reaches_the_model_and_allow_is_silent() -> None:
    event = _event("claude", "pre_tool_use_bash.json")
    warned = json.loads(toolwrites.before_tool("claude", event, lambda p, maybe: ("warn", "bob writes it too"), lambda p: p).stdout)
    assert "bob" in warned["systemMessage"] and "bob" in warned["hookSpecificOutput"]["additionalContext"]
    assert toolwrites.before_tool("claude", event, lambda p, maybe: ("allow", "ok"), lambda p: p).stdout == "{}"
    # nothing inside the repository: no question asked
    assert toolwrites.before_tool("claude", event, lambda p, maybe: pytest.fail("asked"), lambda p: None).stdout == "{}"


@pytest.mark.parametrize("client", ["claude", "codex", "gemini"])
def test_bad_input_warns_or_denies_never_exits_1(client: str) -> None:
    for text in ["not json", "[]", '{"no": "event"}']:
        open_ = toolwrites.answer(client, text)
        assert open_.exit_code == 0 and "systemMessage" in json.loads(open_.stdout)
        closed = toolwrites.answer(client, text, fail_closed=True)
        document = json.loads(closed.stdout)
        assert closed.exit_code == 0
        assert document.get("decision") == "deny" or document["hookSpecificOutput"]["permissionDecision"] == "deny"


@pytest.mark.parametrize("client, name", [("claude", "pre_tool_use_bash.json"), ("codex", "pre_tool_use_bash.json"), ("gemini", "before_tool_shell.json")])
def test_a_before_state_that_cannot_be_kept_is_said_or_denied_under_fail_closed(client, name, monkeypatch, tmp_path) -> None:
    from agents import afterwrites
    from protocol import discovery

    def broken(*args):
        raise OSError("git status failed")

    place = discovery.Place(worktree=tmp_path, repo_id=str(tmp_path), state_dir=tmp_path / "state", in_git=True)
    monkeypatch.setattr(discovery, "locate", lambda cwd=None: place)
    monkeypatch.setattr(afterwrites, "remember", broken)
    event = {**_event(client, name), "tool_input": {"command": "./generate.sh"}}  # no target: nothing asked
    said = json.loads(toolwrites.answer(client, json.dumps(event)).stdout)
    assert "git status failed" in said["systemMessage"] and "not be compared" in said["systemMessage"]
    denied = json.loads(toolwrites.answer(client, json.dumps(event), fail_closed=True).stdout)
    assert denied.get("decision") == "deny" or denied["hookSpecificOutput"]["permissionDecision"] == "deny"
    monkeypatch.setattr(discovery, "locate", lambda cwd=None: discovery.Place(tmp_path, str(tmp_path), tmp_path / "s", in_git=False))
    assert toolwrites.answer(client, json.dumps(event)).stdout == "{}"  # no repository: nothing kept, nothing said


def test_mcp_file_tools_name_their_files_and_other_mcp_tools_write_nothing() -> None:
    """An agent writing through an MCP filesystem server (``mcp__fs__write_file``) once
    wrote unseen: the hooks matched only the clients' own tools."""
    def event(tool: str, **tool_input) -> dict:
        return {"tool_name": tool, "tool_input": tool_input, "cwd": "/r"}

    for client in ("claude", "codex"):
        assert toolwrites.targets(client, event("mcp__filesystem__write_file", path="/r/a.py", content="x")).paths == ["/r/a.py"]
        assert toolwrites.targets(client, event("mcp__fs__edit_file", path="b.py", edits=[])).paths == ["b.py"]
        assert toolwrites.targets(client, event("mcp__fs__move_file", source="c.py", destination="d/c.py")).paths == ["c.py", "d/c.py"]
        assert toolwrites.targets(client, event("mcp__fs__read_file", path="a.py")).paths == []
        assert toolwrites.targets(client, event("mcp__fs__write_file", path=["not", "text"])).paths == []
    # Gemini CLI keeps an MCP tool's own name, prefixed with its server only on a clash
    assert toolwrites.targets("gemini", event("edit_file", path="a.py", edits=[])).paths == ["a.py"]
    assert toolwrites.targets("gemini", event("filesystem__write_file", path="a.py", content="x")).paths == ["a.py"]
    assert toolwrites.targets("gemini", event("write_file", file_path="/r/b.py", content="x")).paths == ["/r/b.py"]  # its own
    assert toolwrites.targets("gemini", event("read_file", path="a.py")).paths == []
    from agents.hook_install import CLIENTS

    for client, event_name in (("claude", "PreToolUse"), ("codex", "PreToolUse"), ("gemini", "BeforeTool")):
        assert "move_file" in CLIENTS[client]["events"][event_name][0]


def test_a_name_with_a_control_character_is_not_asked_for_so_the_calls_other_files_are(tmp_path) -> None:
    import subprocess

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    resolve = toolwrites._resolver({"cwd": str(tmp_path)})
    assert resolve(str(tmp_path / "ok.txt")) == "ok.txt"
    assert resolve(str(tmp_path / "esc\x1b[2J.txt")) is None


def test_the_globs_of_a_call_are_listed_only_as_far_as_they_are_kept(tmp_path, monkeypatch) -> None:
    """Each glob was listed whole, then cut to 1000 names: ``rm -rf /*/*/*/*`` walked
    much of the disk before the hook answered, and ten globs gave ten thousand names.
    Now the call's globs share one bound, are listed no further (``iglob``, cut at the
    bound), and what is past it is said (``unknown``: the after-call comparison checks it)."""
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        for i in range(3):
            (tmp_path / folder / f"f{i}.py").write_text("x")
    monkeypatch.setattr(toolwrites, "MAX_GLOB_MATCHES", 4)
    found = toolwrites.targets("claude", {"tool_name": "Bash", "tool_input": {"command": "rm a/*.py b/*.py c/*.py"}, "cwd": str(tmp_path)})
    kept = [str(tmp_path / "a" / f"f{i}.py") for i in range(3)] + [str(tmp_path / "b" / "f0.py")]
    assert found.paths == kept + [str(tmp_path / "c" / "*.py")]  # matching nothing: the name as written, as in bash
    assert found.unknown == [f"{tmp_path / 'b' / '*.py'}: more than 4 files match the globs of this call: checked after the call"]


def test_a_target_with_a_nul_byte_is_unknown_not_an_error(tmp_path) -> None:
    # `rm 'x\0y'/*` globbed a folder named with a NUL byte: "unexpected ValueError: embedded null byte"
    found = toolwrites.targets("claude", {"tool_name": "Bash", "tool_input": {"command": "rm 'x\0y'/* && touch ok"}, "cwd": str(tmp_path)})
    assert found.paths == [str(tmp_path / "ok")]
    assert found.unknown == ["the target 'x\\x00y/*' contains a NUL byte, which no file name has"]


def test_a_link_is_asked_for_as_itself_and_a_file_named_like_a_glob_as_that_file(tmp_path) -> None:
    """A symbolic link resolved to what it points to (``rm link`` was asked as the file;
    a link to a folder as that folder, which no intent may name); ``rm '[ab].py'`` was
    asked as ``a.py`` only (the quotes are gone when the command is read)."""
    import subprocess

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "app.py").write_text("x")
    (tmp_path / "[ab].py").write_text("literal")
    (tmp_path / "a.py").write_text("a")
    (tmp_path / "link").symlink_to("src/app.py")
    (tmp_path / "folder-link").symlink_to("src")
    event = {"hook_event_name": "PreToolUse", "tool_name": "Bash", "cwd": str(tmp_path), "tool_input": {}}
    asked: list[list[str]] = []

    def decide(patterns, maybe):
        asked.append(patterns)
        return ("allow", "")

    for command in ("rm link", "rm folder-link", "rm '[ab].py'"):
        event["tool_input"]["command"] = command
        toolwrites.before_tool("claude", event, decide, toolwrites._resolver(event))
    assert asked == [["link", "src/app.py"], ["folder-link"], ["\\[ab].py", "a.py"]]


def test_gits_own_files_are_never_asked_for(tmp_path) -> None:
    """``rm -rf .git`` asked to claim up to a thousand files under .git/ (objects, hooks,
    the coordinator's own state): none is a file of the repository's content."""
    import subprocess

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "sub").mkdir()
    event = {"hook_event_name": "PreToolUse", "tool_name": "Bash", "cwd": str(tmp_path), "tool_input": {}}
    asked: list[list[str]] = []

    def decide(patterns, maybe):
        asked.append(patterns)
        return ("allow", "")

    event["tool_input"]["command"] = "rm -rf .git; echo x > .git/hooks/pre-commit; cd .git && touch config; cd ../sub && touch .git ok"
    toolwrites.before_tool("claude", event, decide, toolwrites._resolver(event))
    assert asked == [["sub/ok"]]


def test_the_files_a_diff_names_are_asked_for_and_a_fifo_is_not_read(tmp_path) -> None:
    """``git apply fix.diff`` / ``patch -p1 < fix.diff`` were 'may rewrite any file':
    the files they write were asked for only after the call.  A diff that is a FIFO is
    not opened (the hook would wait for a writer forever)."""
    import os
    import subprocess

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "sub").mkdir()
    (tmp_path / "fix.diff").write_text("diff --git a/src/a.py b/src/a.py\n--- a/src/a.py\n+++ b/src/a.py\n@@ -1 +1 @@\n-a\n+b\n")
    os.mkfifo(tmp_path / "pipe.diff")

    def shell(command: str, cwd=tmp_path):
        return toolwrites.targets("claude", {"tool_name": "Bash", "tool_input": {"command": command}, "cwd": str(cwd)})

    assert shell("git apply fix.diff").paths == [str(tmp_path / "src" / "a.py")]
    assert shell("git apply ../fix.diff", tmp_path / "sub").paths == [str(tmp_path / "src" / "a.py")]  # from the top
    assert shell("patch -p1 < fix.diff && patch -d sub -p0 -i fix.diff").paths == [
        str(tmp_path / "src" / "a.py"), str(tmp_path / "sub" / "a" / "src" / "a.py"), str(tmp_path / "sub" / "b" / "src" / "a.py")]
    found = shell("git apply pipe.diff && git apply gone.diff")
    assert found.paths == [] and [why.split(":")[0] for why in found.unknown] == [str(tmp_path / "pipe.diff"), str(tmp_path / "gone.diff")]


def test_the_folders_a_call_may_rewrite_are_listed_once_each_and_boundedly(tmp_path) -> None:
    """``black src;`` repeated listed src with git once per repeat (a 100,000-character
    command of them held the hook for over half a minute); now each folder is listed
    once, and past ``MAX_LISTED_FOLDERS`` folders the rest is left to the after-call
    comparison."""
    import subprocess

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    for index in range(toolwrites.MAX_LISTED_FOLDERS + 5):
        (tmp_path / f"d{index}").mkdir()
        (tmp_path / f"d{index}" / "a.py").write_text("x")

    def shell(command: str):
        return toolwrites.targets("claude", {"tool_name": "Bash", "tool_input": {"command": command}, "cwd": str(tmp_path)})

    assert shell("black d0; black d0 && find d0 -name '*.py' -delete").maybe == [str(tmp_path / "d0" / "a.py")]
    folders = " ".join(f"d{index}" for index in range(toolwrites.MAX_LISTED_FOLDERS + 5))
    found = shell(f"black {folders}")
    assert len(found.maybe) == toolwrites.MAX_LISTED_FOLDERS
    assert found.unknown == [f"more than {toolwrites.MAX_LISTED_FOLDERS} folders whose files this call may rewrite: past them, checked after the call"]


def test_the_diffs_of_a_call_are_read_once_each_and_boundedly(tmp_path) -> None:
    """``git apply fix.diff;`` repeated read the diff once per repeat, and its one file
    counted again each time until 'more than 1000 files' gave up on the call."""
    (tmp_path / "fix.diff").write_text("--- a/src/a.py\n+++ b/src/a.py\n@@ -1 +1 @@\n-a\n+b\n")
    found = toolwrites.targets("claude", {"tool_name": "Bash", "tool_input": {"command": "patch -p1 < fix.diff;" * 2000}, "cwd": str(tmp_path)})
    assert found.paths == [str(tmp_path / "src" / "a.py")] and found.unknown == []
    for index in range(toolwrites.MAX_LISTED_FOLDERS + 1):
        (tmp_path / f"{index}.diff").write_text(f"--- a/f{index}\n+++ b/f{index}\n")
    command = ";".join(f"patch -p1 -i {index}.diff" for index in range(toolwrites.MAX_LISTED_FOLDERS + 1))
    found = toolwrites.targets("claude", {"tool_name": "Bash", "tool_input": {"command": command}, "cwd": str(tmp_path)})
    assert len(found.paths) == toolwrites.MAX_LISTED_FOLDERS and "more than" in found.unknown[0]


def test_a_call_naming_more_than_one_intent_carries_asks_for_the_first_files_not_none(tmp_path) -> None:
    """Four hundred names of 800 characters made an intent past the message cap,
    refused whole: the call went unasked, its other (held) files too.  Now the intent
    carries the files it can, those written first."""
    import subprocess

    from protocol import messages

    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    long_names = "/".join(letter * 200 for letter in "xyzw") + "/{100..499}"  # braces: 400 names of 800 bytes
    event = {"hook_event_name": "PreToolUse", "tool_name": "Bash", "cwd": str(tmp_path),
             "tool_input": {"command": f"echo x > held.py; touch {long_names}"}}
    asked: list[list[str]] = []

    def decide(patterns, maybe):
        asked.append(patterns)
        return ("allow", "")

    toolwrites.before_tool("claude", event, decide, toolwrites._resolver(event))
    assert asked[0][0] == "held.py" and sum(len(p.encode()) for p in asked[0]) < messages.MAX_MESSAGE_BYTES - 16 * 1024
    assert len(asked[0]) > 100
