"""Generated lines at most ``WIDTH`` characters, broken where a person would break them.

``wrap_line`` breaks a statement inside its widest bracket pair, after an argument's comma
(hanging indent, arguments packed greedily, recursively for an argument that is still too
wide), and a ``#`` comment at spaces. A line it cannot break safely (no bracket, a token it
cannot read) is returned unchanged. ``wrap_text`` applies it to every line of a block of
generated code (not to a block that holds multi-line strings: it reads each line on its own).
"""
from __future__ import annotations

import io
import re
import textwrap
import tokenize

WIDTH = 120
_OPEN, _CLOSE = "([{", ")]}"


def wrap_text(text: str, width: int = WIDTH) -> str:
    """Every line of ``text`` through ``wrap_line``."""
    end = "\n" if text.endswith("\n") else ""
    return "\n".join(out for line in text.splitlines() for out in wrap_line(line, width)) + end


def wrap_line(line: str, width: int = WIDTH) -> list[str]:
    """``line`` as lines of at most ``width`` characters where it can be broken (module docstring)."""
    if len(line) <= width:
        return [line]
    indent = line[: len(line) - len(line.lstrip(" "))]
    body = line[len(indent):]
    if body.startswith("#"):
        return _comment(indent, body, width)
    at = _comment_at(body)
    if at is not None:                       # a trailing comment goes on its own line(s), above
        return _comment(indent, body[at:], width) + wrap_line(indent + body[:at].rstrip(), width)
    split = _split(body)
    if split is None:
        return [line]
    head, args, trailing_comma, tail = split
    inner = indent + (" " * 8 if body.startswith(("def ", "class ")) else " " * 4)
    pieces = [arg + ("," if k < len(args) - 1 or trailing_comma else "") for k, arg in enumerate(args)]
    chunks, current = [], ""
    for k, piece in enumerate(pieces):
        room = width - len(inner) - (len(tail) if k == len(pieces) - 1 else 0)
        candidate = f"{current} {piece}" if current else piece
        if current and len(candidate) > room:
            chunks.append(current)
            candidate = piece
        current = candidate
    chunks.append(current)
    out = [indent + head]
    for chunk in chunks[:-1]:
        out += wrap_line(inner + chunk, width)
    last = wrap_line(inner + chunks[-1], width)
    last[-1] += tail
    return out + last


def _comment(indent: str, body: str, width: int) -> list[str]:
    prefix = re.match(r"#\s*", body).group(0)
    text = body[len(prefix):]
    room = max(20, width - len(indent) - len(prefix) - 2)
    lines = textwrap.wrap(text, room, break_long_words=False, break_on_hyphens=False) or [""]
    return [indent + prefix + lines[0]] + [indent + prefix + "  " + rest for rest in lines[1:]]


def _tokens(body: str) -> list | None:
    try:
        return [t for t in tokenize.generate_tokens(io.StringIO(body + "\n").readline) if t.start[0] == 1]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None


def _comment_at(body: str) -> int | None:
    """Column of a comment after code on this line, if any."""
    tokens = _tokens(body) or []
    return next((t.start[1] for t in tokens if t.type == tokenize.COMMENT and t.start[1] > 0), None)


def _split(body: str):
    """(text through the opening bracket, the arguments, whether a trailing comma follows the last,
    text from the closing bracket on) of the widest top-level bracket pair; None if there is none."""
    tokens = _tokens(body)
    if tokens is None:
        return None
    depth, pairs, commas, open_at = 0, [], {}, None
    for tok in tokens:
        if tok.type != tokenize.OP:
            continue
        col = tok.start[1]
        if tok.string in _OPEN:
            if depth == 0:
                open_at = col
                commas[open_at] = []
            depth += 1
        elif tok.string in _CLOSE:
            depth -= 1
            if depth < 0:
                return None
            if depth == 0:
                pairs.append((open_at, col))
        elif tok.string == "," and depth == 1:
            commas[open_at].append(col)
    if depth != 0 or not pairs:
        return None
    start, stop = max(pairs, key=lambda p: p[1] - p[0])
    cuts = [start] + commas[start] + [stop]
    args = [body[a + 1:b].strip() for a, b in zip(cuts, cuts[1:])]
    trailing_comma = len(args) > 1 and args[-1] == ""
    if trailing_comma:
        args.pop()
    if not any(args):
        return None
    return body[: start + 1], args, trailing_comma, body[stop:]
