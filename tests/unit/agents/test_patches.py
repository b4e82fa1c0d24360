"""agents.patches: the files of a Codex apply_patch envelope."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from agents.patches import patch_files

FIXTURES = Path(__file__).parents[2] / "fixtures" / "hooks"

ENVELOPE = """*** Begin Patch
*** Add File: src/new.py
+print("hi")
+*** Delete File: not/a/header.py
*** Update File: src/old.py
*** Move to: src/renamed.py
@@ def f():
-    return 1
+    return 2
*** Update File: app/[slug]/page.tsx
@@
-a
+b
*** Delete File: src/gone.py
*** End Patch
"""


def test_sections_are_read() -> None:
    found = patch_files(ENVELOPE)
    assert found.is_patch and not found.problems
    assert found.added == ["src/new.py"]
    assert found.updated == ["src/old.py", "app/[slug]/page.tsx"]
    assert found.deleted == ["src/gone.py"]
    assert found.moves == [("src/old.py", "src/renamed.py")]
    assert found.written == ["src/new.py", "app/[slug]/page.tsx", "src/renamed.py"]
    assert found.removed == ["src/gone.py", "src/old.py"]
    assert set(found.paths) == {"src/new.py", "src/old.py", "src/renamed.py", "app/[slug]/page.tsx", "src/gone.py"}


def test_envelope_inside_a_shell_heredoc() -> None:
    command = "apply_patch <<'EOF'\n" + ENVELOPE + "EOF\n"
    assert patch_files(command).paths == patch_files(ENVELOPE).paths


def test_crlf_and_spaces_in_names() -> None:
    found = patch_files("*** Begin Patch\r\n*** Update File: docs/a b.md \r\n@@\r\n-x\r\n+y\r\n*** End Patch\r\n")
    assert found.updated == ["docs/a b.md"]


def test_bad_input_is_reported_not_raised() -> None:
    assert patch_files(None).problems
    assert patch_files(["*** Begin Patch"]).problems
    assert patch_files("*** Update File: \n").problems
    assert patch_files("*** Begin Patch\n*** Move to: x\n*** End Patch").problems
    assert not patch_files("just some text").paths


def test_codex_fixture_payload() -> None:
    event = json.loads((FIXTURES / "codex" / "pre_tool_use_apply_patch.json").read_text())
    found = patch_files(event["tool_input"]["command"])
    assert found.is_patch and found.paths


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=500))
def test_never_raises(text: str) -> None:
    patch_files(text)


NAME = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc", "Zs", "Zl", "Zp")), min_size=1, max_size=20)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["Add", "Update", "Delete"]), NAME), min_size=1, max_size=6))
def test_every_header_is_found(sections) -> None:
    body = ["*** Begin Patch"]
    for kind, name in sections:
        body.append(f"*** {kind} File: {name}")
        body.append("+*** Add File: decoy" if kind != "Delete" else "")
    body.append("*** End Patch")
    found = patch_files("\n".join(line for line in body if line))
    assert set(found.paths) == {name for _, name in sections}
