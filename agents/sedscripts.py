"""The files a sed script writes: the ``w FILE`` command (and GNU's ``W FILE``) and the
``w FILE`` flag of ``s``, read off the script before sed runs (``agents.shellcommands``).
"""

from __future__ import annotations


def _sed_written(script: str) -> tuple[list[str], bool]:
    """The files a sed script writes (``w FILE``, ``W FILE``, the ``w FILE`` flag of
    ``s``: the name runs to the end of the line, GNU's rule), and whether it runs shell
    commands (the ``e`` command or flag).  The script is read command by command, its
    addresses, regular expressions and texts skipped, so a ``w`` inside them is no
    command (``s/w x/y/``, ``/w/d``)."""
    written: list[str] = []
    runs = False
    index, end = 0, len(script)
    while index < end:
        char = script[index]
        if char in " \t\n;{}!":
            index += 1
            continue
        if char == "#":
            index = _sed_line_end(script, index)
            continue
        index = _sed_address(script, index)
        if index < end and script[index] == ",":
            index = _sed_address(script, index + 1)
        while index < end and script[index] in " \t!":
            index += 1
        if index >= end:
            break
        command = script[index]
        index += 1
        if command in "wW":
            name, index = _sed_file_name(script, index)
            written.append(name)
        elif command in "rRaice":
            runs = runs or command == "e"
            index = _sed_line_end(script, index, continued=command in "aic")
        elif command in ":btT":
            while index < end and script[index] not in ";\n":
                index += 1
        elif command in "sy":
            if index >= end:
                break
            delimiter = script[index]
            index = _sed_delimited(script, _sed_delimited(script, index + 1, delimiter), delimiter)
            while command == "s" and index < end and script[index] not in ";\n}#":
                flag = script[index]
                if flag == "w":
                    name, index = _sed_file_name(script, index + 1)
                    written.append(name)
                    break
                runs = runs or flag == "e"
                index += 1
        # other commands are one letter (p d q 5 ...): what follows is read as the next one
    return [name for name in written if name], runs


def _sed_address(script: str, index: int) -> int:
    """The index after the sed address at ``index`` (none: ``index``): a number,
    ``first~step``, ``$``, ``+N``/``~N``, or ``/regex/`` or ``\\cregexc`` with flags."""
    end = len(script)
    if index < end and script[index] in "+~":
        index += 1
    if index < end and script[index].isdigit():
        while index < end and (script[index].isdigit() or script[index] == "~"):
            index += 1
    elif index < end and script[index] == "$":
        index += 1
    elif index < end and (script[index] == "/" or (script[index] == "\\" and index + 1 < end)):
        delimiter = "/" if script[index] == "/" else script[index + 1]
        index = _sed_delimited(script, index + (1 if delimiter == "/" and script[index] == "/" else 2), delimiter)
        while index < end and script[index] in "IM":
            index += 1
    return index


def _sed_delimited(script: str, index: int, delimiter: str) -> int:
    """The index after the ``delimiter`` that ends the part starting at ``index`` (a
    backslash escapes the next character)."""
    while index < len(script) and script[index] != delimiter:
        index += 2 if script[index] == "\\" else 1
    return index + 1


def _sed_file_name(script: str, index: int) -> tuple[str, int]:
    while index < len(script) and script[index] in " \t":
        index += 1
    line_end = script.find("\n", index)
    line_end = len(script) if line_end < 0 else line_end
    return script[index:line_end], line_end


def _sed_line_end(script: str, index: int, continued: bool = False) -> int:
    """The index of the newline that ends the text at ``index`` (a, i, c: a line ending in
    a backslash goes on)."""
    while True:
        line_end = script.find("\n", index)
        if line_end < 0:
            return len(script)
        if not (continued and script[index:line_end].endswith("\\")):
            return line_end
        index = line_end + 1
