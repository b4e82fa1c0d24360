"""agents.shellwrites: the files a shell command writes, read before it runs."""

from __future__ import annotations

import shlex

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.shellwrites import MAX_COMMAND_CHARS, write_targets

CASES = [
    # redirections
    ("echo x > src/main.py", ["src/main.py"]),
    ("echo x >> log.txt", ["log.txt"]),
    ("make &> build.log", ["build.log"]),
    ("make &>> build.log", ["build.log"]),
    ("cmd 2> err.txt", ["err.txt"]),
    ("cmd 2>/dev/null >out 2>&1", ["out"]),
    ("cmd >| forced", ["forced"]),
    ("cmd <> rw", ["rw"]),
    ("cmd >&out.txt", ["out.txt"]),
    ("cmd < input.txt", []),
    ("grep x a.py", []),
    ('echo "a > b" > c', ["c"]),
    ("echo x # > not-a-target", []),
    # a '#' inside a word is text, not a comment (sed's other delimiter, an anchor)
    ("sed -i s#a#b#g src/app.py && echo x > held.py", ["src/app.py", "held.py"]),
    ("touch notes#1.md", ["notes#1.md"]),
    ("echo x;#rm y\ntouch z", ["z"]),
    ("ls|#rm y\ntouch z", ["z"]),
    ("echo 'a # b' > f # rm g", ["f"]),
    # tee, sed -i, perl -i
    ("ls | tee -a listing.txt other.txt", ["listing.txt", "other.txt"]),
    ("sed -i s/a/b/ src/main.py", ["src/main.py"]),
    ("sed -i.bak 's/a/b/' a.py b.py", ["a.py", "b.py"]),
    ("sed -ie s/x/y/ f", ["f"]),  # GNU: -i with the suffix 'e'
    ("sed -n -e p -i f g", ["f", "g"]),
    ("sed --in-place --expression=s/a/b/ f", ["f"]),
    ("sed s/a/b/ f", []),
    ("perl -pi -e 's/a/b/' f", ["f"]),
    ("perl -i -pe s/a/b/ f g", ["f", "g"]),
    # file utilities
    ("cp a.py b.py", ["b.py"]),
    ("cp a.py b.py dir", ["dir/a.py", "dir/b.py"]),
    ("cp -r src/ dest/", ["dest/src"]),
    ("cp -t out a b", ["out/a", "out/b"]),
    ("mv old.py new.py", ["old.py", "new.py"]),
    ("rm -rf build dist", ["build", "dist"]),
    ("rm -- -weird", ["-weird"]),
    ("touch -d yesterday a b", ["a", "b"]),
    ("mkdir -p -m 755 src/new", ["src/new"]),
    ("truncate -s 0 log", ["log"]),
    ("ln -s target link", ["link"]),
    ("ln -sfn releases/v2 current", ["current"]),  # -n: the link itself, even to a folder
    ("cp -T build out", ["out"]),
    ("ln -s ../shared/config.py", ["config.py"]),
    ("dd if=/dev/zero of=disk.img bs=1k", ["disk.img"]),
    ("chmod +x run.sh", ["run.sh"]),
    # tools that write the file an option or an operand names
    ("curl -sSLo vendor/lib.js https://x/lib.js", ["vendor/lib.js"]),
    ("curl https://x --output=a.json -D headers.txt", ["a.json", "headers.txt"]),
    ("wget -qO data.csv https://x/data.csv", ["data.csv"]),
    ("sort -u -o names.txt names.txt", ["names.txt"]),
    ("iconv -f latin1 -t utf8 -o out.txt in.txt", ["out.txt"]),
    ("uniq in.txt out.txt", ["out.txt"]),
    ("jq . a.json | sponge a.json", ["a.json"]),
    ("patch -d src app.py fix.diff", ["src/app.py"]),
    ("rsync -a build/ dist/ && rsync lib.py vendor/", ["dist/", "vendor/lib.py"]),
    ("gzip big.log", ["big.log", "big.log.gz"]),
    ("gunzip -k data.gz", ["data"]),
    ("tar czf out.tgz src", ["out.tgz"]),
    ("gawk -i inplace -v n=1 '{print}' a.txt", ["a.txt"]),
    ("install -m 644 a.cfg etc/a.cfg", ["etc/a.cfg"]),
    # a brace expression gives a copy its operands: the last one is the destination
    ("cp settings.py{,.bak}", ["settings.py.bak"]),
    ("mv settings.py{.bak,}", ["settings.py.bak", "settings.py"]),
    ("cp src/{a,b}.py dest", ["dest/a.py", "dest/b.py"]),
    ("git mv {old,new}.py", ["old.py", "new.py"]),
    # git
    ("git checkout -- a.py b.py", ["a.py", "b.py"]),
    ("git checkout HEAD~1 -- a.py", ["a.py"]),
    # without '--': a commit then files, or files of a conflict
    ("git checkout main src/app.py src/b.py", ["src/app.py", "src/b.py"]),
    ("git checkout --theirs src/app.py", ["src/app.py"]),
    ("git restore a.py", ["a.py"]),
    ("git restore --source HEAD~2 a.py", ["a.py"]),
    ("git restore --staged a.py", []),
    ("git restore --staged --worktree a.py", ["a.py"]),
    ("git mv a.py b.py", ["a.py", "b.py"]),
    ("git rm -r --cached old", ["old"]),
    ("git -C sub rm x", ["sub/x"]),
    ("git status && git diff", []),
    # lists, pipes, cd
    ("cd src && echo x >> a.py; tee b < d | cat", ["src/a.py", "src/b"]),
    ("cd src; cd api && rm x", ["src/api/x"]),
    ("(cd sub && rm a); rm b", ["sub/a", "b"]),
    ("a&&b>c;d", ["c"]),
    ("echo a\nrm b", ["b"]),
    ("true || rm -f x", ["x"]),
    ("FOO=1 sudo -u root env X=1 touch q", ["q"]),
    ("timeout 5 rm x", ["x"]),
    # a wrapper's option values are not the command; env -C / sudo -D run it elsewhere
    ("timeout -s KILL 5 rm x", ["x"]),
    ("timeout -k 1 --signal TERM 5s tee x", ["x"]),
    ("stdbuf -o L tee x", ["x"]),
    ("exec -a name tee x", ["x"]),
    ("/usr/bin/time -f %e -o timing.txt tee x", ["timing.txt", "x"]),
    ("env -C sub touch x; touch y", ["sub/x", "y"]),
    ("env --chdir=sub touch x", ["sub/x"]),
    ("sudo -D sub touch x", ["sub/x"]),
    ("env -S 'tee x'", ["x"]),
    ("doas -u root tee x", ["x"]),
    ("setsid -w tee x", ["x"]),
    ("if true; then rm x; fi", ["x"]),
    ('bash -c "rm -rf build"', ["build"]),
    ("eval 'rm x' && eval sed -i s/a/b/ y", ["x", "y"]),  # eval runs its words joined
    ("sh -c 'cd src && touch y'", ["src/y"]),
    ("cat > f <<EOF\nrm q\nEOF\ntouch z", ["f", "z"]),
    ("cat <<'EOF' > f\nhello 'world\nEOF", ["f"]),
    # the delimiter is a shell word, quotes removed: the document ends where bash ends it
    ("cat <<E\\OF > f\nx\nEOF\ntouch g", ["f", "g"]),
    ("cat <<@@ > f\nit's\n@@\ntouch g", ["f", "g"]),
    ("cat <<'END OF' > f\nx\nEND OF\ntouch g", ["f", "g"]),
    ("rm ~/outside", None),  # expanded by the caller's home: checked below
    ("echo x > /abs/path", ["/abs/path"]),
    ("echo x > /dev/null 2>/dev/stderr; cd /dev && touch null", []),
    ("echo x > /dev/../repo/held.py", ["/dev/../repo/held.py"]),  # not a device: the caller resolves it
]


@pytest.mark.parametrize(("command", "expected"), [c for c in CASES if c[1] is not None])
def test_targets(command: str, expected: list[str]) -> None:
    found = write_targets(command)
    assert found.targets == expected
    assert not found.unknown, found.unknown


def test_home_is_expanded() -> None:
    found = write_targets("rm ~/outside")
    assert len(found.targets) == 1 and found.targets[0].endswith("/outside") and not found.targets[0].startswith("~")


UNKNOWN = [
    ("echo x > $OUT", "variable"),
    ("echo $(rm x)", "command substitution"),
    ("echo `date` > f", "command substitution"),
    ("git checkout main", "switch branches"),
    ("git checkout -b topic main", "switches branches"),
    ("git reset --hard", "git reset"),
    ("git stash pop", "git stash"),
    ("find . -name '*.pyc' -delete", "find"),
    ("ls | xargs rm", "xargs"),
    ("eval \"rm $X\"", "eval"),
    ('echo "unterminated', "cannot be split"),
    ("cd $DIR && rm x", "run time"),
    ("cd && rm x", "home"),
    ("diff <(a) <(b)", "process substitution"),
    ("bash script.sh", "script"),
    ("echo x >", "no target"),
    ("cp f{1..5000} dest", "too many"),
    ("curl -s https://x/fix.diff | patch -p1", "its diff names"),
    ("tar -xzf vendor.tgz", "archive holds"),
    ("unzip -o a.zip", "archive holds"),
    ("wget https://x/y.tgz", "after the URL"),
    ("curl -O https://x/y.tgz", "after the URL"),
]


@pytest.mark.parametrize(("command", "reason"), UNKNOWN)
def test_unreadable_parts_are_unknown(command: str, reason: str) -> None:
    found = write_targets(command)
    assert any(reason in why for why in found.unknown), found


def test_unknown_keeps_what_it_did_read() -> None:
    found = write_targets("echo $(rm x) > $OUT; touch y")
    assert found.targets == ["x", "y"]
    assert found.unknown


@pytest.mark.parametrize(("command", "expected"), [
    ("echo `touch a`", ["a"]),  # backquotes run their command like $(...)
    ('echo "`sed -i s/x/y/ b`"', ["b"]),
    ('x="$(rm -f c)"', ["c"]),  # quoted: one word, but the command still runs
    ('echo "$(echo "$(touch deep)")"', ["deep"]),
    ('cd sub && echo "a $(touch d) b $(touch e)"', ["sub/d", "sub/e"]),
    ("echo '$(touch no)' '`touch no`' > f", ["f"]),  # single quotes: text
    ("sed -i 's/$(OLD)/$(NEW)/' Makefile", ["Makefile"]),
])
def test_commands_in_substitutions_are_read(command: str, expected: list[str]) -> None:
    assert write_targets(command).targets == expected


def test_cd_to_unknown_drops_later_relative_targets_but_not_absolute() -> None:
    found = write_targets("cd $X && rm a /abs/b")
    assert found.targets == ["/abs/b"]
    assert found.unknown


def test_globs_are_left_to_the_caller() -> None:
    found = write_targets("rm src/*.pyc; touch 'x[1].txt'")
    assert found.globs == ["src/*.pyc", "x[1].txt"]
    assert found.targets == []


def test_is_dir_decides_copy_into_folder() -> None:
    assert write_targets("cp a.py dest", is_dir=lambda p: p == "dest").targets == ["dest/a.py"]
    assert write_targets("ln -sfn v2 current", is_dir=lambda p: p == "current").targets == ["current"]
    assert write_targets("mv -T new old", is_dir=lambda p: p == "old").targets == ["new", "old"]
    assert write_targets("cp a.py dest", is_dir=lambda p: False).targets == ["dest"]
    assert write_targets("cd x && mv a.py dest", is_dir=lambda p: p == "x/dest").targets == ["x/a.py", "x/dest/a.py"]


def test_huge_or_non_text_input_is_unknown_not_a_crash() -> None:
    assert write_targets("x" * (MAX_COMMAND_CHARS + 1)).unknown
    assert write_targets(None).unknown  # type: ignore[arg-type]


def test_nested_shells_are_bounded() -> None:
    command = "rm x"
    for _ in range(5):
        command = f"bash -c {shlex.quote(command)}"
    assert any("nested" in why for why in write_targets(command).unknown)
    assert write_targets("bash -c 'sh -c \"rm x\"'").targets == ["x"]


# --------------------------------------------------------------------------- properties

NAMES = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="\x00/*?[$`~\\"), min_size=1, max_size=12).filter(
    lambda n: n not in (".", "..") and not n.startswith("-")
)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_never_raises_on_any_text(text: str) -> None:
    found = write_targets(text)
    assert all(isinstance(p, str) for p in found.targets + found.globs)


WRITERS = [
    lambda f: f"echo hi > {f}",
    lambda f: f"printf x >> {f}",
    lambda f: f"sed -i s/a/b/ {f}",
    lambda f: f"tee {f}",
    lambda f: f"rm -f {f}",
    lambda f: f"touch {f}",
    lambda f: f"cp /etc/hostname {f}",
    lambda f: f"git checkout -- {f}",
    lambda f: f"git restore {f}",
    lambda f: f"truncate -s 0 {f}",
]
OPERATOR_CHARS = set(";&|<>()\n")


def looks_like_operator(name: str) -> bool:
    """shlex returns such a name, even quoted, as operator characters ('<<-' included)."""
    return OPERATOR_CHARS.issuperset(name.replace("-", "")) and name.replace("-", "") != ""


JOINERS = [" && ", "; ", " | ", "\n", " || "]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(range(len(WRITERS))), NAMES), min_size=1, max_size=5),
    st.sampled_from(JOINERS),
    st.lists(st.sampled_from(["ls", "grep -r x .", "git status", "echo done"]), max_size=3),
)
def test_every_written_name_is_found_however_quoted(writes, joiner, readers) -> None:
    """Each writer's target is found, whatever characters its (quoted) name holds, and
    read-only commands between them add nothing.  The one blind spot of splitting with
    shlex: a quoted name made only of operator characters (';', '&&') reads as the
    operator; the reading then says it is incomplete instead of missing it silently."""
    parts = [WRITERS[index](shlex.quote(name)) for index, name in writes] + readers
    found = write_targets(joiner.join(parts))
    names = {name for _, name in writes}
    for name in names:
        if looks_like_operator(name):
            assert name in found.targets or found.unknown
        else:
            assert name in found.targets
    assert set(found.targets) - {"/etc/hostname"} <= names


@settings(max_examples=200, deadline=None)
@given(NAMES.filter(lambda n: not looks_like_operator(n)), NAMES.filter(lambda n: not looks_like_operator(n)))
def test_cd_prefix_joins(folder: str, name: str) -> None:
    found = write_targets(f"cd {shlex.quote(folder)} && echo x > {shlex.quote(name)}")
    assert found.targets == [f"{folder}/{name}"]


@pytest.mark.parametrize("command, restores", [
    ("git checkout -- a.py b.py", ["a.py", "b.py"]),
    ("git checkout HEAD -- a.py", ["a.py"]),
    ("git checkout HEAD~1 -- a.py", []),  # another commit's bytes: new content here
    ("git restore a.py", ["a.py"]),
    ("git restore --source HEAD a.py", ["a.py"]),
    ("git restore --source HEAD~2 a.py", []),
    ("git checkout -- a.py && echo x > a.py", []),  # written by something else too
    ("git checkout HEAD a.py", ["a.py"]),
    ("git checkout main a.py", []),
    ("cd src && git restore a.py", ["src/a.py"]),
])
def test_what_git_only_puts_back_is_listed_as_restored(command, restores):
    found = write_targets(command)
    assert found.restores == restores and set(restores) <= set(found.targets)


DIFF = "diff --git a/src/a.py b/src/a.py\n--- a/src/a.py\n+++ b/src/a.py\n@@ -1 +1 @@\n-a\n+b\n"


def test_a_diff_applied_is_handed_to_the_caller() -> None:
    """git apply / patch write the files their diff names: a here-document's text, or
    the diff file for the caller to read (they were only 'may rewrite any file')."""
    found = write_targets(f"git apply - <<'EOF'\n{DIFF}EOF\ntouch after")
    assert found.targets == ["after"] and [(d.text, d.strip, d.from_top) for d in found.diffs] == [(DIFF, 1, True)]
    found = write_targets("cd sub && patch -p2 < ../fix.diff; git apply --directory=lib -p0 x.diff")
    assert [(d.file, d.strip, d.folder, d.from_top, d.directory) for d in found.diffs] == [
        ("sub/../fix.diff", 2, "sub", False, ""), ("sub/x.diff", 0, "sub", True, "lib")]
    assert write_targets("patch -i fix.diff").diffs[0].strip is None  # no -p: the name only
    for writes_nothing in ("git apply --check x.diff", "git apply --cached x.diff", "git apply --stat x.diff"):
        assert write_targets(writes_nothing).diffs == [] and not write_targets(writes_nothing).unknown
    assert "given at run time" in write_targets("curl -s https://x/y.diff | git apply").unknown[0]
    assert [d.file for d in write_targets("cat fix.diff | patch -p1").diffs] == ["fix.diff"]


@pytest.mark.parametrize(("command", "formatted"), [
    ("find src -name '*.py' -exec sed -i 's/a/b/' {} +", [("src", (".py",))]),
    ("find src tests -name '*.py' -o -name '*.pyi' -delete", [("src", (".py", ".pyi")), ("tests", (".py", ".pyi"))]),
    ("cd app && find . -name 'x[0-9].py' -exec rm {} \\;", [("app", ("",))]),  # a test not read: any file
    ("find src -type f -exec grep -l x {} +", []),  # reads only
    ("find src -exec cp {} /tmp/backup/ \\;", []),  # writes elsewhere, not the files found
    ("find . -type d -empty -delete", []),  # folders only
])
def test_find_writing_the_files_it_finds_names_their_folders(command, formatted) -> None:
    """find -delete / -exec sed -i {} were only 'unknown': a held file under the folder
    was rewritten before anyone was asked.  The folders (with the -name suffixes) are
    now candidates, checked against other agents' claims."""
    found = write_targets(command)
    assert found.formatted == formatted and any("find" in why for why in found.unknown)


@pytest.mark.parametrize(("command", "formatted"), [
    ("grep -rl foo src | xargs sed -i 's/foo/bar/g'", [("src", ("",))]),
    ("rg -l foo src tests | xargs perl -pi -e s/a/b/", [("src", ("",)), ("tests", ("",))]),
    ("grep -rl --include='*.py' foo . | xargs -0 -n 1 sed -i s/a/b/", [(".", (".py",))]),
    ("git ls-files src | xargs -I{} sed -i s/a/b/ {}", [("src", ("",))]),
    ("cd app && find . -name '*.ts' | xargs rm", [("app", (".ts",))]),
    ("grep -r foo src | xargs sed -i s/a/b/", []),  # lines, not file names
    ("grep -rl foo src | xargs grep bar", []),  # reads only
    ("cat list | xargs rm", []),  # a list the reading is given no reader for: unknown, left to the after-call comparison
])
def test_xargs_writing_files_another_command_lists_names_their_folders(command, formatted) -> None:
    """``grep -rl x src | xargs sed -i ...`` rewrote a held file before anyone was asked
    ('xargs' was only unknown): the folders the listing command searches are candidates."""
    found = write_targets(command)
    assert found.formatted == formatted and any("xargs" in why for why in found.unknown)


SHELL_PIECES = ["$(", ")", "`", "'", '"', "\\", "<<", "<<-", "EOF", "\n", "#", "{", "}", ",", "..", "*", "[", " ", ";", "|", "&&", ">",
                "<", "2>&1", "cd ", "sed -i ", "git apply ", "patch -p1 ", "xargs ", "find . -exec ", "{}", " +", "eval ", "env -C ",
                "timeout -s ", "bash -c ", "a", "b/", "-", "--", "$x", "\0"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(SHELL_PIECES), max_size=60))
def test_never_raises_on_shell_like_text(pieces: list[str]) -> None:
    found = write_targets("".join(pieces))
    assert all(isinstance(p, str) for p in found.targets + found.globs)


@pytest.mark.parametrize(("command", "expected"), [
    ("echo x > $'a\\x62c.txt'", ["abc.txt"]),
    ("touch $'tab\\there' $'new\\nline'", ["tab\there", "new\nline"]),
    ("rm $'it\\'s' $'back\\\\slash' $'q\\\"'", ["it's", "back\\slash", 'q"']),
    ("touch $'\\101\\1012' $'\\u00e9t\\u00E9' $'\\U0001F600'", ["AA2", "été", "\U0001F600"]),
    ("touch $'\\e\\a\\b\\f\\r\\v\\cA\\c?'", ["\x1b\a\b\f\r\v\x01\x7f"]),
    ("touch $'\\q\\x\\u\\xZZ\\x4g'", ["\\q\\x\\u\\xZZ\x04g"]),  # malformed: kept as written, as bash does
    ("touch $'a\\0b'c", ["ac"]),  # a NUL ends the decoded text, as in bash
    ("touch $'\\xc3\\xa9'", ["é"]),  # bytes, read as the UTF-8 they make
    ("touch pre$'\\x2f'post", ["pre/post"]),
    ("sed -i s/a/b/ $\"src/app.py\" && echo x > $\"my file\"", ["src/app.py", "my file"]),
    ("echo \"$'a\\x62c'\" > f", ["f"]),  # in double quotes $'...' is text, not a target
    ("echo '$'\"'\"'x'\"'\"'' > g", ["g"]),
    ("echo \\$'abc' > h", ["h"]),
    ("bash -c $'touch one\\ntouch two'", ["one", "two"]),
])
def test_ansi_c_quoting_is_decoded(command: str, expected: list[str]) -> None:
    """``$'a\\x62c.txt'`` is the file abc.txt: the hook asked for '$a\\x62c.txt', a name
    nobody holds, and the write went through unchecked."""
    found = write_targets(command)
    assert found.targets == expected and not found.unknown, found


def test_an_unclosed_ansi_c_quote_is_unknown() -> None:
    found = write_targets("echo x > $'abc")
    assert found.targets == [] and any("cannot be split" in why for why in found.unknown)


@pytest.mark.parametrize(("command", "expected"), [
    ("sed 'w out.txt' f", ["out.txt"]),
    ("sed -n '/x/w out.txt' f", ["out.txt"]),
    ("sed -e 's/a/b/w out.txt' f", ["out.txt"]),
    ("sed -i -e 's/a/b/gw log.txt' -e '/y/W two.txt' f g", ["f", "g", "log.txt", "two.txt"]),
    ("sed -i.bak '1,3w top 3.txt' x", ["x", "top 3.txt"]),  # the name runs to the end of the line
    ("sed -ne '\\,w,w o1' f", ["o1"]),  # a \cREGEXc address
    ("sed '$!{/re/I w sel\n}' f", ["sel"]),
    ("sed --expression='1~2w odd' f", ["odd"]),
    ("sed 'a\\\nw text\nw real' f", ["real"]),  # the appended text is no command
    ("sed 's/w x/y/;/w/d;y/w/v/' f", []),  # a w in a regex or a replacement is no command
    ("sed 's/a/b/;# w c\nw d' f", ["d"]),
    ("sed -n 'w /dev/stdout' f", []),
    ("sed -n p f", []),
])
def test_sed_w_writes_its_file(command: str, expected: list[str]) -> None:
    """``sed 'w out.txt' f`` writes out.txt: it was not read at all (only -i was)."""
    found = write_targets(command)
    assert found.targets == expected and not found.unknown, found


def test_sed_e_runs_commands() -> None:
    assert any("e command" in why for why in write_targets("sed 's/x/date/e' f").unknown)


LISTS = {
    "list.txt": "a.txt\nsub/b.txt\n'c d.txt'\n",
    "sub/list.txt": "x.py y.py\n",
    "nul.lst": "x $y.py\0{a,b}.py\0*.py\0",
    "huge.txt": "\n".join(f"f{n}" for n in range(10_001)),
    "bad.txt": "'unclosed\n",
}


def _read_list(path: str) -> str | None:
    return LISTS.get(path)


@pytest.mark.parametrize(("command", "expected"), [
    ("xargs rm < list.txt", ["a.txt", "sub/b.txt", "c d.txt"]),
    ("xargs -a list.txt rm -f", ["a.txt", "sub/b.txt", "c d.txt"]),
    ("xargs --arg-file=list.txt rm", ["a.txt", "sub/b.txt", "c d.txt"]),
    ("xargs --arg-file list.txt -n 1 rm", ["a.txt", "sub/b.txt", "c d.txt"]),
    ("cat list.txt | xargs rm", ["a.txt", "sub/b.txt", "c d.txt"]),
    ("xargs sed -i s/a/b/ < list.txt", ["a.txt", "sub/b.txt", "c d.txt"]),
    ("xargs -I{} cp {} out/ < list.txt", ["out/a.txt", "out/b.txt", "out/c d.txt"]),
    ("xargs -i mv {} {}.bak < sub/list.txt", ["x.py y.py", "x.py y.py.bak"]),  # -I: one name a line
    ("xargs -d '\\n' rm < list.txt", ["a.txt", "sub/b.txt", "'c d.txt'"]),  # -d: no quotes read
    ("cd sub && xargs rm < list.txt", ["sub/x.py", "sub/y.py"]),  # the list and its names from the command's folder
    ("xargs -0 rm < nul.lst", ["x $y.py", "{a,b}.py", "*.py"]),  # a listed name is literal
    ("xargs grep x < list.txt", []),
])
def test_xargs_names_from_a_list_file_are_its_command_operands(command: str, expected: list[str]) -> None:
    """``xargs rm < list.txt`` removed a held file unasked: xargs was only 'unknown'.
    The list is read before the call and its names are the command's operands."""
    found = write_targets(command, read_list=_read_list)
    assert found.targets == expected and not found.globs and not found.unknown, found


@pytest.mark.parametrize(("command", "reason"), [
    ("xargs rm < missing.txt", "cannot be read now"),
    ("xargs rm < huge.txt", "more than 10000 names"),
    ("xargs rm < bad.txt", "cannot split"),
    ("xargs rm < $LIST", "cannot be read now"),
])
def test_an_xargs_list_that_cannot_be_read_leaves_its_names_unknown(command: str, reason: str) -> None:
    found = write_targets(command, read_list=_read_list)
    assert found.targets == [] and any(reason in why for why in found.unknown), found
    assert any("xargs runs a command" in why for why in found.unknown)
