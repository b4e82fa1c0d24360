"""agents.diffs: the files a unified diff writes, read off its headers."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from agents.diffs import diff_paths

GIT_DIFF = """diff --git a/src/app.py b/src/app.py
index 1111111..2222222 100644
--- a/src/app.py
+++ b/src/app.py
@@ -1,3 +1,3 @@
 x
--- a removed line, not a header
+++ an added line, not a header
 y
diff --git a/old name.py b/new name.py
similarity index 90%
rename from old name.py
rename to new name.py
diff --git a/created.py b/created.py
new file mode 100644
--- /dev/null
+++ b/created.py
@@ -0,0 +1 @@
+hi
"""


def test_git_headers_name_each_file_once_and_hunk_lines_are_content() -> None:
    assert diff_paths(GIT_DIFF, 1) == ["src/app.py", "old name.py", "new name.py", "created.py"]


def test_strip_is_patchs_p_and_no_p_keeps_the_name_only() -> None:
    plain = "--- orig/lib/util.c\t2024-01-01 10:00\n+++ new/lib/util.c\t2024-01-02 10:00\n@@ -1 +1 @@\n-a\n+b\n"
    assert diff_paths(plain, 0) == ["orig/lib/util.c", "new/lib/util.c"]
    assert diff_paths(plain, 1) == ["lib/util.c"]
    assert diff_paths(plain, 3) == []  # fewer folders than stripped: no name
    assert diff_paths(plain, None) == ["util.c"]


def test_quoted_names_are_unquoted() -> None:
    text = 'diff --git "a/sp ace\\tx.py" "b/sp ace\\tx.py"\n--- "a/sp ace\\tx.py"\n+++ "b/sp ace\\tx.py"\n'
    assert diff_paths(text, 1) == ["sp ace\tx.py"]


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300), st.one_of(st.none(), st.integers(min_value=0, max_value=5)))
def test_never_raises(text: str, strip) -> None:
    assert all(isinstance(name, str) and name for name in diff_paths(text, strip))
