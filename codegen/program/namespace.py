"""Safe names and literals for generated Python (STYLE.md "Generated code: readable and safe").

- ``Namespace``: one per emitted module, as torch.fx's ``_Namespace``: a model's name
  becomes an identifier by replacing ``[^0-9A-Za-z_]`` with ``_`` (runs of ``_`` become one),
  dropping the ONNX exporters' ``_output_0`` suffix, prefixing a leading digit, avoiding
  keywords, builtins and reserved names, deduplicating with ``_1``, ``_2`` …; the same object
  always gets the same name. A name longer than ``MAX_NAME`` loses whole leading words
  (``layer_attention_self_key_Add`` → ``attention_self_key_Add``), never part of a word.
- ``literal``: the only way a value reaches generated source. int, float, bool, None,
  str (printed with ``ascii``: pure ASCII, quotes and newlines escaped), and tuples,
  lists and str-keyed dicts of those. Anything else (arrays, objects) raises — it must
  go through a sidecar ``.npz`` or an explicit table.
- ``comment``: text for a ``#`` comment, on one line and ASCII-escaped, so a model's
  name can never end the comment and start code.
"""
from __future__ import annotations

import builtins
import keyword
import math
import re
from typing import Any, Hashable, Iterable

_BAD = re.compile(r"[^0-9A-Za-z_]+")
_RUNS = re.compile(r"_{2,}")
MAX_NAME = 64


class Namespace:
    """Identifiers for a generated module (see the module docstring)."""

    def __init__(self, reserved: Iterable[str] = ()) -> None:
        self._taken: set[str] = set(reserved) | set(dir(builtins)) | set(keyword.kwlist) | set(keyword.softkwlist)
        self._names: dict[Hashable, str] = {}

    def name(self, key: Hashable, hint: str) -> str:
        """The identifier of ``key`` (created from ``hint`` the first time)."""
        if key in self._names:
            return self._names[key]
        base = sanitize(hint)
        text, k = base, 1
        while text in self._taken:
            text, k = f"{base}_{k}", k + 1
        self._taken.add(text)
        self._names[key] = text
        return text

    def reserve(self, *names: str) -> None:
        self._taken.update(names)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._names


def sanitize(hint: str) -> str:
    """``hint`` as an identifier-shaped string (not yet deduplicated)."""
    text = _RUNS.sub("_", _BAD.sub("_", hint)).strip("_")
    if text.endswith("_output_0") and len(text) > len("_output_0"):
        text = text[: -len("_output_0")]
    words = text.split("_") if text else ["v"]
    while len(words) > 1 and len("_".join(words)) > MAX_NAME:
        words.pop(0)
    text = "_".join(words)
    if text[0].isdigit():
        text = "_" + text
    if keyword.iskeyword(text) or keyword.issoftkeyword(text) or text in dir(builtins) or text.startswith("__"):
        text = text + "_"
    return text


def literal(value: Any) -> str:
    """Python source for a plain value (see the module docstring); TypeError otherwise."""
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, int) or _is_np_scalar(value, "iu"):
        return repr(int(value))
    if isinstance(value, float) or _is_np_scalar(value, "f"):
        f = float(value)
        if math.isnan(f):
            return 'float("nan")'
        if math.isinf(f):
            return 'float("inf")' if f > 0 else '-float("inf")'
        return repr(f)
    if isinstance(value, str):
        return ascii(value)
    if isinstance(value, tuple):
        inner = ", ".join(literal(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, list):
        return "[" + ", ".join(literal(v) for v in value) + "]"
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return "{" + ", ".join(f"{literal(k)}: {literal(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"no safe literal for a {type(value).__name__}")


def _is_np_scalar(value: Any, kinds: str) -> bool:
    dtype = getattr(value, "dtype", None)
    return dtype is not None and getattr(value, "shape", None) == () and dtype.kind in kinds


def comment(text: str, limit: int = 100) -> str:
    """One-line, ASCII-only text safe to put after ``#``."""
    body = ascii(str(text))[1:-1]
    return body if len(body) <= limit else body[: limit - 3] + "..."
