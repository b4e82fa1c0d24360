"""Writes Lockstep must see: renames and deletes at commit, files named with glob
characters, against a real coordinator and real git worktrees."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from .conftest import LOCKSTEP, bare_origin, cli, env_for, status

FAST = ("--heartbeat", "0.2", "--liveness", "5", "--lock-delay", "1")
FIXTURES = Path(__file__).parents[1] / "fixtures" / "hooks"


def _git(cwd, *args, env=None):
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, env=env_for(env), timeout=60)


def _fixture(client: str, name: str, cwd: Path) -> dict:
    """A recorded payload with its '/repo' paths moved into a real worktree."""
    text = (FIXTURES / client / name).read_text().replace("/repo", str(cwd))
    return json.loads(text)


def _hook(client: str, event: dict, cwd: Path, env: dict | None = None, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([*LOCKSTEP, "hook", client, *flags], input=json.dumps(event), cwd=cwd,
                          env=env_for(env), capture_output=True, text=True, timeout=60)


def test_the_guard_refuses_a_rename_or_delete_of_a_held_file(repo, coordinator):
    coordinator(*FAST)
    assert cli("guard", "install", cwd=repo.root).rc == 0
    assert cli("claim", "src/app.py", "--agent", "alice", cwd=repo.root).rc == 0
    assert _git(repo.other, "mv", "src/app.py", "src/renamed.py").returncode == 0
    as_bob = _git(repo.other, "commit", "-qm", "rename", env={"LOCKSTEP_AGENT": "bob"})
    assert as_bob.returncode != 0 and "alice" in as_bob.stderr
    as_person = _git(repo.other, "commit", "-qm", "rename")
    assert as_person.returncode != 0 and "src/app.py (held by alice)" in as_person.stderr
    # a plain deletion is refused the same way
    assert _git(repo.other, "reset", "-q", "--hard").returncode == 0
    assert _git(repo.other, "rm", "-q", "src/app.py").returncode == 0
    deleted = _git(repo.other, "commit", "-qm", "delete", env={"LOCKSTEP_AGENT": "bob"})
    assert deleted.returncode != 0 and "alice" in deleted.stderr
    assert cli("release", "--all", "--agent", "alice", cwd=repo.root).rc == 0
    assert _git(repo.other, "commit", "-qm", "delete", env={"LOCKSTEP_AGENT": "bob"}).returncode == 0


def test_the_push_guard_refuses_a_rename_or_delete_of_a_held_file(repo, coordinator, tmp_path):
    coordinator(*FAST)
    bare_origin(repo.other, tmp_path, push="HEAD:refs/heads/base")
    (repo.other / "src" / "gone.py").write_text("gone\n")
    assert _git(repo.other, "add", "src/gone.py").returncode == 0 and _git(repo.other, "commit", "-qm", "gone").returncode == 0
    assert _git(repo.other, "push", "-q", "origin", "HEAD:refs/heads/base").returncode == 0
    # committed while nobody held them: a rename and a deletion
    assert _git(repo.other, "mv", "src/app.py", "src/renamed.py").returncode == 0
    assert _git(repo.other, "rm", "-q", "src/gone.py").returncode == 0
    assert _git(repo.other, "commit", "-qm", "rename and delete").returncode == 0
    assert cli("guard", "install", cwd=repo.root).rc == 0
    for held in ("src/app.py", "src/gone.py"):  # the old name of the rename, the deleted file
        assert cli("claim", held, "--agent", "alice", cwd=repo.root).rc == 0
        refused = _git(repo.other, "push", "-q", "origin", "HEAD:refs/heads/topic", env={"LOCKSTEP_AGENT": "bob"})
        assert refused.returncode != 0 and "alice" in refused.stderr, held
        assert cli("release", "--all", "--agent", "alice", cwd=repo.root).rc == 0
    assert _git(repo.other, "push", "-q", "origin", "HEAD:refs/heads/topic", env={"LOCKSTEP_AGENT": "bob"}).returncode == 0


def test_a_file_named_with_glob_characters_is_coordinated_end_to_end(repo, coordinator):
    coordinator(*FAST)
    page = repo.root / "app" / "[slug]" / "page.tsx"
    page.parent.mkdir(parents=True)
    page.write_text("export default function Page() { return null }\n")
    assert _git(repo.root, "add", ".").returncode == 0 and _git(repo.root, "commit", "-qm", "page").returncode == 0
    _git(repo.other, "merge", "-q", "main")
    # a glob would be refused as an intent; the literal claim takes exactly that file
    claimed = cli("claim", "--literal", "app/[slug]/page.tsx", "--agent", "alice", "--json", cwd=repo.root)
    assert claimed.rc == 0 and claimed.json["patterns"] == ["app/\\[slug]/page.tsx"]
    # the escaped spelling names the same file
    again = cli("claim", "app/\\[slug]/page.tsx", "--agent", "alice", "--json", cwd=repo.root)
    assert again.rc == 0 and again.json["patterns"] == ["app/\\[slug]/page.tsx"]
    # Claude Code's Write of that file by another agent is denied, naming the holder
    event = _fixture("claude", "pre_tool_use_write.json", repo.other)
    denied = _hook("claude", event, repo.other, {"LOCKSTEP_AGENT": "bob"})
    decision = json.loads(denied.stdout)["hookSpecificOutput"]
    assert denied.returncode == 0 and decision["permissionDecision"] == "deny" and "alice" in decision["permissionDecisionReason"]
    # intent on the existing file is that file, not a glob
    blocked = cli("intent", "app/[slug]/page.tsx", "--agent", "bob", "--json", cwd=repo.other)
    assert blocked.rc == 1 and blocked.json["holders"] == ["alice"]
    # a sibling folder whose name a class would match is a different file
    sibling = cli("intent", "--literal", "app/s/page.tsx", "--agent", "bob", "--json", cwd=repo.other)
    assert sibling.rc == 0 and sibling.json["verdict"] == "allow"
    holders = {c["pattern"]: c["holder"] for c in status(repo)["claims"]}
    assert holders["app/\\[slug]/page.tsx"] == "alice" and holders["app/s/page.tsx"] == "bob"


def test_shell_and_patch_writes_of_a_held_file_are_denied_for_every_client(repo, coordinator):
    coordinator(*FAST)
    (repo.other / "src" / "main.py").write_text("old\n")
    assert cli("claim", "src/main.py", "--agent", "alice", cwd=repo.root).rc == 0
    cases = [
        ("claude", "pre_tool_use_bash.json"),  # sed -i ... src/main.py
        ("codex", "pre_tool_use_bash.json"),  # echo x > src/main.py
        ("codex", "pre_tool_use_apply_patch.json"),  # *** Update File: src/main.py
        ("gemini", "before_tool_shell.json"),  # sed -i ... main.py in directory src
        ("gemini", "before_tool_write_file.json"),
    ]
    for client, name in cases:
        answer = _hook(client, _fixture(client, name, repo.other), repo.other, {"LOCKSTEP_AGENT": "bob"})
        assert answer.returncode == 0, (client, name, answer.stderr)
        document = json.loads(answer.stdout)
        if client == "gemini":
            assert document["decision"] == "deny" and "alice" in document["reason"], (name, document)
        else:
            decision = document["hookSpecificOutput"]
            assert decision["permissionDecision"] == "deny" and "alice" in decision["permissionDecisionReason"], (client, name)
    # a shell call writing only free files goes on, and claims them for its writer
    event = _fixture("claude", "pre_tool_use_bash.json", repo.other)
    event["tool_input"]["command"] = "cd src && echo x > fresh.py"
    allowed = _hook("claude", event, repo.other, {"LOCKSTEP_AGENT": "bob"})
    assert allowed.returncode == 0 and allowed.stdout.strip() in ("", "{}")
    assert {c["pattern"]: c["holder"] for c in status(repo)["claims"]}["src/fresh.py"] == "bob"


def test_shell_command_lines_agents_write_with_are_refused_before_they_write_a_held_file(repo, coordinator):
    """Each command line writes src/app.py, which alice holds; bob's shell call is
    denied before it runs, naming her (each was let through unasked before)."""
    coordinator(*FAST)
    assert cli("claim", "src/app.py", "--agent", "alice", cwd=repo.root).rc == 0
    event = _fixture("claude", "pre_tool_use_bash.json", repo.other)
    commands = [
        "sed -i s#print#log#g src/app.py",  # '#' inside a word is no comment
        "cp src/app.py{,.bak} && mv src/app.py{.bak,}",  # braces give mv its destination
        "timeout -s KILL 60 tee src/app.py < /dev/null",  # -s takes a value: tee is the command
        "env -C src touch app.py",  # env -C runs touch in src
        "git checkout main src/app.py",  # a commit then a file, without '--'
        "cat <<E\\OF > /dev/null\nx\nEOF\ntruncate -s 0 src/app.py",  # the document ends at EOF
        "rm -rf build/ && mkdir -p out/ && echo x > src/app.py",  # a folder that is not there holds no file
        f"echo x > /dev/..{repo.other / 'src' / 'app.py'}",  # not a device once normalised
    ]
    for command in commands:
        event["tool_input"]["command"] = command
        answer = _hook("claude", event, repo.other, {"LOCKSTEP_AGENT": "bob"})
        assert answer.returncode == 0, (command, answer.stderr)
        decision = json.loads(answer.stdout or "{}").get("hookSpecificOutput", {})
        assert decision.get("permissionDecision") == "deny", (command, answer.stdout)
        assert "alice" in decision["permissionDecisionReason"], (command, decision)
    assert (repo.other / "src" / "app.py").read_text() == "print('hi')\n"


def test_a_diff_applied_to_a_held_file_is_refused_before_it_is_applied(repo, coordinator):
    """git apply / patch write the files their diff names (a file, or a here-document):
    they are asked for before the call, as an edit of them is."""
    coordinator(*FAST)
    diff = "diff --git a/src/app.py b/src/app.py\n--- a/src/app.py\n+++ b/src/app.py\n@@ -1 +1 @@\n-print('hi')\n+print('bye')\n"
    (repo.other / "fix.diff").write_text(diff)
    assert cli("claim", "src/app.py", "--agent", "alice", cwd=repo.root).rc == 0
    event = _fixture("claude", "pre_tool_use_bash.json", repo.other)
    for command in ("git apply fix.diff", "cd src && git apply ../fix.diff", "patch -p1 < fix.diff", f"patch -p1 <<'EOF'\n{diff}EOF"):
        event["tool_input"]["command"] = command
        answer = _hook("claude", event, repo.other, {"LOCKSTEP_AGENT": "bob"})
        decision = json.loads(answer.stdout or "{}").get("hookSpecificOutput", {})
        assert decision.get("permissionDecision") == "deny" and "alice" in decision["permissionDecisionReason"], (command, answer.stdout)
    # a check applies nothing and asks nothing
    event["tool_input"]["command"] = "git apply --check fix.diff"
    assert _hook("claude", event, repo.other, {"LOCKSTEP_AGENT": "bob"}).stdout.strip() in ("", "{}")


def test_find_or_xargs_rewriting_the_files_found_is_refused_while_one_of_them_is_held(repo, coordinator):
    """``find src -name '*.py' -exec sed -i ... {} +`` and ``grep -rl x src | xargs sed
    -i ...`` rewrote a held file before anyone was asked: the files they may write (git's,
    under the folders searched, with the -name suffix) are now checked."""
    coordinator(*FAST)
    assert cli("claim", "src/app.py", "--agent", "alice", cwd=repo.root).rc == 0
    event = _fixture("claude", "pre_tool_use_bash.json", repo.other)
    for command in ("find src -name '*.py' -exec sed -i s/hi/bye/ {} +", "grep -rl hi src | xargs sed -i s/hi/bye/"):
        event["tool_input"]["command"] = command
        answer = _hook("claude", event, repo.other, {"LOCKSTEP_AGENT": "bob"})
        decision = json.loads(answer.stdout or "{}").get("hookSpecificOutput", {})
        assert decision.get("permissionDecision") == "deny" and "alice" in decision["permissionDecisionReason"], (command, answer.stdout)
    event["tool_input"]["command"] = "find src -name '*.md' -delete"  # none of alice's files
    assert _hook("claude", event, repo.other, {"LOCKSTEP_AGENT": "bob"}).stdout.strip() in ("", "{}")


def test_xargs_on_a_list_file_naming_a_held_file_is_refused_before_it_runs(repo, coordinator):
    """``xargs rm < list.txt`` removed a held file with only an 'unknown' noted: the list
    is read before the call and its names are asked for."""
    coordinator(*FAST)
    assert cli("claim", "src/app.py", "--agent", "alice", cwd=repo.root).rc == 0
    (repo.other / "list.txt").write_text("README.md\nsrc/app.py\n")
    (repo.other / "src" / "names.txt").write_text("app.py\n")
    event = _fixture("claude", "pre_tool_use_bash.json", repo.other)
    for command in ("xargs rm < list.txt", "xargs -a list.txt rm", "xargs --arg-file=list.txt sed -i s/a/b/",
                    "cat list.txt | xargs rm", "cd src && xargs rm < names.txt", "xargs -I{} cp README.md {} < list.txt"):
        event["tool_input"]["command"] = command
        answer = _hook("claude", event, repo.other, {"LOCKSTEP_AGENT": "bob"})
        decision = json.loads(answer.stdout or "{}").get("hookSpecificOutput", {})
        assert decision.get("permissionDecision") == "deny" and "alice" in decision["permissionDecisionReason"], (command, answer.stdout)
    assert (repo.other / "src" / "app.py").exists()
    # a list of free files goes on, and claims them for its writer
    (repo.other / "free.txt").write_text("notes.md\n")
    event["tool_input"]["command"] = "xargs touch < free.txt"
    assert _hook("claude", event, repo.other, {"LOCKSTEP_AGENT": "bob"}).stdout.strip() in ("", "{}")
    assert {c["pattern"]: c["holder"] for c in status(repo)["claims"]}.get("notes.md") == "bob"


def test_a_symlink_and_a_file_named_like_a_glob_are_asked_for_as_themselves(repo, coordinator):
    """``rm 'src/[ab].py'`` writes the file named so (it was asked as src/a.py, which the
    glob matches); a symbolic link is a file of its own (a link to a folder was asked as
    that folder, which no intent may name, so the whole call went uncoordinated)."""
    coordinator(*FAST)
    (repo.root / "link").symlink_to("src/app.py")
    (repo.root / "folder-link").symlink_to("src")
    (repo.root / "src" / "[ab].py").write_text("literal\n")
    (repo.root / "src" / "a.py").write_text("a\n")
    assert _git(repo.root, "add", ".").returncode == 0 and _git(repo.root, "commit", "-qm", "links").returncode == 0
    assert _git(repo.other, "merge", "-q", "main").returncode == 0
    event = _fixture("claude", "pre_tool_use_bash.json", repo.other)

    def hook(agent: str, command: str) -> dict:
        event["tool_input"]["command"] = command
        answer = _hook("claude", event, repo.other, {"LOCKSTEP_AGENT": agent})
        assert answer.returncode == 0, (command, answer.stderr)
        return json.loads(answer.stdout or "{}")

    def denied(document: dict) -> bool:
        decision = document.get("hookSpecificOutput", {})
        return decision.get("permissionDecision") == "deny" and "alice" in decision["permissionDecisionReason"]

    assert cli("claim", "--literal", "src/[ab].py", "--agent", "alice", cwd=repo.root).rc == 0
    assert cli("claim", "src/app.py", "--agent", "alice", cwd=repo.root).rc == 0
    assert denied(hook("bob", "rm 'src/[ab].py'"))
    assert denied(hook("bob", "rm folder-link && echo x > src/app.py"))
    # alice's own call on the link claims the link; bob's is then refused
    assert hook("alice", "rm folder-link") == {}
    assert denied(hook("bob", "ln -sfn lib folder-link"))
    # the quotes are gone when the command is read: what the glob matches is asked for
    # too, as is the file a link to a file points to (echo x > link writes it)
    assert cli("release", "--all", "--agent", "alice", cwd=repo.root).rc == 0
    assert hook("bob", "rm link 'src/[ab].py'") == {}
    holders = {c["pattern"]: c["holder"] for c in status(repo)["claims"]}
    assert holders == {"link": "bob", "src/app.py": "bob", "src/\\[ab].py": "bob", "src/a.py": "bob"}, holders


def test_a_formatter_run_on_a_folder_is_refused_while_another_agent_holds_a_file_it_may_rewrite(repo, coordinator):
    coordinator(*FAST)
    (repo.other / ".gitignore").write_text("build/\n")
    (repo.other / "build").mkdir()
    (repo.other / "build" / "gen.py").write_text("x = 1\n")  # ignored: no formatter touches it
    (repo.other / "src" / "util.py").write_text("x = 1\n")  # untracked, not ignored: formatted too
    (repo.other / "src" / "notes.md").write_text("notes\n")  # not Python: black leaves it
    for path, holder in (("src/app.py", "alice"), ("src/notes.md", "carol"), ("build/gen.py", "carol")):
        assert cli("claim", path, "--agent", holder, cwd=repo.root).rc == 0
    event = _fixture("claude", "pre_tool_use_bash.json", repo.other)

    def run(command: str) -> dict:
        event["tool_input"]["command"] = command
        answer = _hook("claude", event, repo.other, {"LOCKSTEP_AGENT": "bob"})
        assert answer.returncode == 0, answer.stderr
        return json.loads(answer.stdout or "{}")

    for command in ("black src", "cd src && ruff format", "python -m black .", "uv run ruff check --fix"):
        decision = run(command)["hookSpecificOutput"]
        reason = decision["permissionDecisionReason"]
        assert decision["permissionDecision"] == "deny" and "src/app.py" in reason and "alice" in reason, (command, reason)
        assert "carol" not in reason and "your own files" in reason, (command, reason)
    # on its own file it goes on, claiming that file; a check-only run asks nothing
    assert run("black src/util.py") == {}
    assert run("black --check src") == {} and run("ruff format --diff .") == {}
    # once alice lets go, the folder run goes on and claims none of the files it may rewrite
    assert cli("release", "--all", "--agent", "alice", cwd=repo.root).rc == 0
    assert run("black src") == {}
    assert {c["pattern"]: c["holder"] for c in status(repo)["claims"]} == {
        "src/util.py": "bob", "src/notes.md": "carol", "build/gen.py": "carol",
    }


def test_without_a_coordinator_hooks_warn_visibly_or_deny_when_fail_closed(repo):
    for client, name in [("claude", "pre_tool_use_bash.json"), ("codex", "pre_tool_use_apply_patch.json"), ("gemini", "before_tool_shell.json")]:
        event = _fixture(client, name, repo.root)
        open_ = _hook(client, event, repo.root, {"LOCKSTEP_TIMEOUT": "0.5"})
        assert open_.returncode == 0 and "not coordinated" in json.loads(open_.stdout)["systemMessage"]
        closed = _hook(client, event, repo.root, {"LOCKSTEP_TIMEOUT": "0.5"}, "--fail-closed")
        document = json.loads(closed.stdout)
        assert closed.returncode == 0
        assert document.get("decision") == "deny" or document["hookSpecificOutput"]["permissionDecision"] == "deny"


def _links(repo) -> None:
    """``link`` -> src/app.py and ``folder-link`` -> src, committed, in both worktrees."""
    (repo.root / "link").symlink_to("src/app.py")
    (repo.root / "folder-link").symlink_to("src")
    (repo.root / "lib").mkdir()
    (repo.root / "lib" / "util.py").write_text("u\n")
    assert _git(repo.root, "add", ".").returncode == 0 and _git(repo.root, "commit", "-qm", "links").returncode == 0
    assert _git(repo.other, "merge", "-q", "main").returncode == 0


def test_a_link_claimed_conflicts_with_a_write_through_it_or_of_it_and_the_other_way_round(repo, coordinator):
    """``claim LINK`` claimed only what the link points to, while the hooks ask for the link
    itself (``rm link``, ``ln -sfn``): an agent replacing a link another had claimed went
    through, and a claim of a link another had replaced was granted.  A link names both,
    for claim and hooks alike."""
    coordinator(*FAST)
    _links(repo)
    event = _fixture("claude", "pre_tool_use_bash.json", repo.other)

    def hook(agent: str, command: str) -> dict:
        event["tool_input"]["command"] = command
        answer = _hook("claude", event, repo.other, {"LOCKSTEP_AGENT": agent})
        assert answer.returncode == 0, (command, answer.stderr)
        return json.loads(answer.stdout or "{}")

    def denied(document: dict, holder: str = "alice") -> bool:
        decision = document.get("hookSpecificOutput", {})
        return decision.get("permissionDecision") == "deny" and holder in decision["permissionDecisionReason"]

    # alice claims the links: both the links and what they point to are hers
    claimed = cli("claim", "link", "folder-link", "--agent", "alice", "--json", cwd=repo.other)
    assert claimed.rc == 0, claimed
    assert {c["pattern"] for c in status(repo)["claims"]} == {"link", "folder-link", "src/app.py", "src/"}
    for command in ("echo x > src/app.py", "echo x > link", "ln -sf README.md link", "rm link",
                    "echo x > folder-link/new.py", "echo x > src/new.py", "ln -sfn lib folder-link", "rm folder-link"):
        assert denied(hook("bob", command)), command
    assert cli("release", "link", "folder-link", "--agent", "alice", cwd=repo.other).rc == 0
    assert status(repo)["claims"] == []
    # the other way round: alice's calls write the links (the hooks claim them for her) ...
    assert hook("alice", "ln -sfn lib folder-link") == {}
    assert hook("alice", "echo x > link") == {}
    assert {c["pattern"] for c in status(repo)["claims"]} == {"folder-link", "link", "src/app.py"}
    # ... and bob's claims of them, or of what they point to, are refused
    for path in ("folder-link", "link", "src/app.py"):
        refused = cli("claim", path, "--agent", "bob", cwd=repo.other)
        assert refused.rc == 1 and "alice" in refused.out + refused.err, (path, refused)
    intent = cli("intent", "link", "--agent", "bob", cwd=repo.other)
    assert intent.rc == 1 and "alice" in intent.out, intent
