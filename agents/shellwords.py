"""Shell text into words and operators, as bash splits it: the first step of the shell
reading (``agents.shellwrites``).

``shlex`` in POSIX mode with ``punctuation_chars`` does the splitting; what it does not
know is done before it: here-document bodies are cut out (data, not commands: an
apostrophe in one would stop ``shlex``), comments are cut where bash starts them (a
``#`` that starts a word, outside quotes), ``$'...'`` (ANSI-C quoting) is decoded and
``$"..."`` read as ``"..."``, and backquotes are written as ``$(...)``.
"""

from __future__ import annotations

import shlex

_OPERATOR_CHARS = frozenset(";&|<>()\n")


_QUOTED_PAREN = "\ue000"  # a '(' of '$(' in single quotes while the text is read (a private-use character)


_WORD_ENDS = frozenset(" \t\r\n;&|<>()")  # a '#' after one of these starts a comment


# Longest first: shlex hands over a run of operator characters as one token (");" or
# ">&"), which is cut here into the shell's operators.
_OPERATORS = sorted(
    ["&>>", "&>", ">>", ">|", "<>", "<<<", "<<-", "<<", ">&", "<&", "&&", "||", "|&", ";;&", ";;", ";&",
     "<(", ">(", ">", "<", "&", "|", ";", "(", ")", "\n"],
    key=len,
    reverse=True,
)


def _tokens(command: str) -> list[str]:
    lexer = shlex.shlex(_backquotes_as_dollar(_cut_comments(_ansi_c_quoted(command))), posix=True, punctuation_chars=";&|<>()\n")
    lexer.commenters = ""  # shlex starts a comment at any '#', even inside a word: cut above
    lexer.whitespace = " \t\r"
    lexer.whitespace_split = True
    tokens: list[str] = []
    for token in lexer:
        if not token or not _OPERATOR_CHARS.issuperset(token):
            tokens.append(token)
            continue
        while token:
            operator = next(op for op in _OPERATORS if token.startswith(op))
            tokens.append(operator)
            token = token[len(operator) :]
    return tokens


def _ansi_c_quoted(command: str) -> str:
    """The command with each bare ``$'...'`` (ANSI-C quoting) written as the single-quoted
    text bash decodes it to (``$'a\\x62c'`` is ``'abc'``), and each bare ``$"..."`` (a
    translated string) as ``"..."``: ``shlex`` knows neither and would keep the ``$``.
    An unclosed ``$'`` is left as written (``shlex`` then says it cannot split it)."""
    if "$'" not in command and '$"' not in command:
        return command
    out: list[str] = []
    quote = ""
    index = start = 0
    while index < len(command):
        after, quote, bare = _shell_step(command, index, quote)
        if bare and command[index] == "$" and command.startswith("'", index + 1):
            end = index + 2
            while end < len(command) and command[end] != "'":
                end += 2 if command[end] == "\\" else 1
            if end >= len(command):
                break  # unclosed
            text = _ansi_c_decoded(command[index + 2 : end])
            out += [command[start:index], "'", text.replace("'", "'\\''"), "'"]
            index = start = end + 1
            continue
        if bare and command[index] == "$" and command.startswith('"', index + 1):
            out.append(command[start:index])
            start = index + 1  # $"text" is "text" (bash translates it only with a message catalogue)
        index = after
    out.append(command[start:])
    return "".join(out)


_ANSI_C_SIMPLE = {"a": b"\a", "b": b"\b", "e": b"\x1b", "E": b"\x1b", "f": b"\f", "n": b"\n", "r": b"\r", "t": b"\t", "v": b"\v",
                  "\\": b"\\", "'": b"'", '"': b'"', "?": b"?"}


_ANSI_C_DIGITS = {"x": 2, "u": 4, "U": 8}  # the most hex digits each escape reads


_OCTAL = frozenset("01234567")


_HEX = frozenset("0123456789abcdefABCDEF")


def _ansi_c_decoded(text: str) -> str:
    """The text of ``$'text'`` as bash decodes it: ``\\n \\t \\\\ \\' \\"`` and the other
    C escapes, ``\\NNN`` (octal) and ``\\xHH`` (bytes), ``\\uHHHH`` / ``\\UHHHHHHHH``
    (characters), ``\\cX`` (control-X).  A malformed escape (``\\q``, ``\\x`` with no
    digit) stays as written, as in bash; a NUL byte ends the text, as in bash (a C string).
    Bytes that are no UTF-8 are kept as the file system's names hold them
    (``surrogateescape``)."""
    out = bytearray()
    index = 0
    while index < len(text):
        char = text[index]
        if char != "\\" or index + 1 >= len(text):
            out += _utf8(char)
            index += 1
            continue
        letter = text[index + 1]
        index += 2
        if letter in _ANSI_C_SIMPLE:
            out += _ANSI_C_SIMPLE[letter]
        elif letter in _OCTAL:
            digits = letter
            while len(digits) < 3 and index < len(text) and text[index] in _OCTAL:
                digits += text[index]
                index += 1
            out.append(int(digits, 8) & 0xFF)
        elif letter in _ANSI_C_DIGITS:
            most = _ANSI_C_DIGITS[letter]
            digits = ""
            while len(digits) < most and index < len(text) and text[index] in _HEX:
                digits += text[index]
                index += 1
            value = int(digits, 16) if digits else None
            if value is None or (letter != "x" and (value > 0x10FFFF or 0xD800 <= value <= 0xDFFF)):
                out += _utf8("\\" + letter + digits)  # malformed: kept as written
            elif letter == "x":
                out.append(value)
            else:
                out += chr(value).encode("utf-8")
        elif letter == "c" and index < len(text) and text[index].isascii():
            control = text[index]
            index += 1
            out.append(0x7F if control == "?" else ord(control.upper()) & 0x1F)
        else:
            out += _utf8("\\" + letter)
    return bytes(out).partition(b"\0")[0].decode("utf-8", "surrogateescape")


def _utf8(text: str) -> bytes:
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a lone surrogate (JSON allows one): no file name has it
        return text.encode("utf-8", "surrogatepass")


def _cut_comments(command: str) -> str:
    """The command without its comments: a ``#`` that starts a word, outside quotes, to
    the end of its line.  A ``#`` inside a word is text (``sed -i s#a#b# f``, ``a#b``),
    where ``shlex`` would end the line."""
    if "#" not in command:
        return command
    kept: list[str] = []
    quote = ""
    index = start = 0
    while index < len(command):
        after, quote, bare = _shell_step(command, index, quote)
        if bare and command[index] == "#" and (index == 0 or command[index - 1] in _WORD_ENDS):
            kept.append(command[start:index])
            end = command.find("\n", index)
            index = start = len(command) if end < 0 else end
            continue
        index = after
    kept.append(command[start:])
    return "".join(kept)


def _backquotes_as_dollar(command: str) -> str:
    """`cmd` written as $(cmd) (outside single quotes), so that its commands are read
    as those of any other substitution; an escaped \\` stays text.  A ``$(`` inside
    single quotes is text (``sed 's/$(OLD)/x/'``): its ``(`` becomes ``_QUOTED_PAREN``,
    put back in the words read (``_unmarked``)."""
    if ("`" not in command and "$(" not in command) or _QUOTED_PAREN in command:
        return command
    out: list[str] = []
    quote = ""
    opened = False
    index = 0
    while index < len(command):
        char = command[index]
        if char == "\\" and quote != "'":
            out.append(command[index : index + 2])
            index += 2
            continue
        if char == "'" and quote != '"' and not opened:
            quote = "" if quote == "'" else "'"
        elif char == '"' and quote != "'" and not opened:
            quote = "" if quote == '"' else '"'
        elif char == "`" and quote != "'":
            char = ")" if opened else "$("
            opened = not opened
        elif char == "(" and quote == "'" and index > 0 and command[index - 1] == "$":
            char = _QUOTED_PAREN
        out.append(char)
        index += 1
    return "".join(out)


def _unmarked(words: list[str]) -> list[str]:
    """The words as the command has them (see ``_backquotes_as_dollar``)."""
    return [word.replace(_QUOTED_PAREN, "(") for word in words]


def _substitutions(word: str) -> list[str]:
    """The scripts of the ``$(...)`` in one word (a quoted one: ``"$(cmd)"``), outermost
    first; a ``(`` left open runs to the end of the word."""
    scripts: list[str] = []
    index = word.find("$(")
    while index >= 0:
        depth, end = 0, index + 1
        while end < len(word):
            if word[end] == "(":
                depth += 1
            elif word[end] == ")":
                depth -= 1
                if depth == 0:
                    break
            end += 1
        scripts.append(word[index + 2 : end])
        index = word.find("$(", end)
    return scripts


def _heredocs_in(line: str) -> list[tuple[str, str]]:
    """The (strip-tabs flag, delimiter) of each here-document a line opens: a ``<<``
    outside quotes ('<<0' quoted is a file name, not a here-document)."""
    found = []
    quote = ""
    index = 0
    while index < len(line):
        after, quote, bare = _shell_step(line, index, quote)
        if bare and line[index] == "#" and (index == 0 or line[index - 1] in _WORD_ENDS):
            break  # a comment
        if bare and line.startswith("<<", index) and not line.startswith("<<<", index) and (index == 0 or line[index - 1] != "<"):
            opened = _heredoc_at(line, index)
            if opened is not None:
                found.append(opened[:2])
                index = opened[2]
                continue
        index = after
    return found


def _shell_step(text: str, index: int, quote: str) -> tuple[int, str, bool]:
    """Read ``text[index]`` as the shell does: (the index after it and what it escapes,
    the quote open after it, whether it is bare: outside quotes, not escaped, no quote)."""
    char = text[index]
    if quote:
        if char == quote:
            return index + 1, "", False
        return index + (2 if char == "\\" and quote == '"' else 1), quote, False
    if char == "\\":
        return index + 2, "", False
    if char in "'\"":
        return index + 1, char, False
    return index + 1, "", True


def _heredoc_at(line: str, index: int) -> tuple[str, str, int] | None:
    """The here-document opened by the ``<<`` at ``index``: (``-`` or '', its delimiter,
    the index after it).  The delimiter is a shell word with its quotes removed, as bash
    compares it (``<<E\\OF``, ``<<'EOF'``, ``<<"E"OF`` all end at a line ``EOF``)."""
    index += 2
    strip = ""
    if line.startswith("-", index):
        strip, index = "-", index + 1
    while index < len(line) and line[index] in " \t":
        index += 1
    word: list[str] = []
    quote = ""
    while index < len(line):
        char = line[index]
        if quote:
            if char == quote:
                quote = ""
            elif char == "\\" and quote == '"' and index + 1 < len(line) and line[index + 1] in '\\"$`':
                index += 1
                word.append(line[index])
            else:
                word.append(char)
        elif char in "'\"":
            quote = char
        elif char == "\\" and index + 1 < len(line):
            index += 1
            word.append(line[index])
        elif char in _WORD_ENDS:
            break
        else:
            word.append(char)
        index += 1
    return (strip, "".join(word), index) if word else None


def _cut_heredocs(command: str) -> tuple[str, list[str]]:
    """The command without here-document bodies (they are data, not commands, and may
    hold any text: an apostrophe would stop ``shlex``), and the bodies in order (a
    diff given to ``git apply`` or ``patch`` is read)."""
    if "<<" not in command:
        return command, []
    lines = command.split("\n")
    kept: list[str] = []
    bodies: list[str] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        kept.append(line)
        index += 1
        for strip_tabs, delimiter in _heredocs_in(line):
            start = index
            while index < len(lines):
                body = lines[index]
                index += 1
                if (body.lstrip("\t") if strip_tabs else body) == delimiter:
                    break
            bodies.append("\n".join(lines[start : index - 1 if index > start else start]) + "\n")
    return "\n".join(kept), bodies
