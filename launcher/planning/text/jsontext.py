"""Indented JSON text for big values (plans of 100,000 ranks, rank tables of 4,096 servers), fast (pure).

``json.dumps(value, indent=2)`` falls back to the pure-Python encoder whenever ``indent`` is set:
about 3 s for an 80,000-rank plan.  :func:`dumps_indented` gives the same text from orjson's
encoder (a maintained C library) in a tenth of that, and falls back to :func:`_render` (same
bytes as ``json.dumps``, without its slow pure-Python indenting encoder) where orjson would differ
or refuses.  The rank-table renderer writes its tables through the same two functions.
"""

from __future__ import annotations

import json
import json.encoder
from typing import Any, Iterable, List


def dumps_indented(value: Any) -> str:
    """``json.dumps(value, indent=2)``: the same text for values of strings, integers, booleans,
    None, lists and dicts with string keys (what plans and rank tables hold).  Floats are valid
    JSON of the same value but may be spelled differently (``1e-07`` vs ``1e-7``).

    orjson writes non-ASCII characters (and DEL, U+007F) as they are where ``json.dumps`` escapes them, refuses
    lone surrogates, integers beyond 64 bits and non-string keys: for those values the slower
    encoders are used, so the result never depends on whether orjson is installed.
    """
    try:
        import orjson
    except ImportError:  # pragma: no cover - a dependency, but the text must not depend on it
        orjson = None  # type: ignore[assignment]  # the module or None: the slower encoders then
    if orjson is not None:
        try:
            data = orjson.dumps(value, option=orjson.OPT_INDENT_2)
        except (TypeError, ValueError):  # orjson.JSONEncodeError is a TypeError
            data = None
        if data is not None and data.isascii() and b"\x7f" not in data:  # json.dumps escapes DEL too
            return data.decode("ascii")
    parts: List[str] = []
    try:
        _render(value, "", parts)
    except TypeError:
        return json.dumps(value, indent=2)
    return "".join(parts)


_encode_str = json.encoder.encode_basestring_ascii  # the C function when _json is available


def _render(value: Any, indent: str, out: List[str]) -> None:
    """Append ``json.dumps(value, indent=2)`` text to ``out`` (same bytes, without the slow
    pure-Python encoder that ``json`` falls back to whenever ``indent`` is set).

    Raises:
        TypeError: a dict key that is not a string (the caller falls back to ``json.dumps``).
    """
    if isinstance(value, str):
        out.append(_encode_str(value))
    elif isinstance(value, dict):
        _render_items("{", "}", value.items(), True, indent, out)
    elif isinstance(value, list):
        _render_items("[", "]", value, False, indent, out)
    else:
        out.append(json.dumps(value))


def _render_items(open_: str, close: str, items: Iterable[Any], keyed: bool, indent: str, out: List[str]) -> None:
    """Append an object's ``(key, value)`` items (``keyed``) or a list's values, one a line
    indented by two more spaces, between ``open_`` and ``close`` (``{}`` / ``[]`` when empty).

    Raises:
        TypeError: a key that is not a string.
    """
    inner = indent + "  "
    first = open_ + "\n" + inner
    sep = first
    for item in items:
        out.append(sep)
        if keyed:
            key, item = item
            if not isinstance(key, str):
                raise TypeError("non-string key")
            out.append(_encode_str(key))
            out.append(": ")
        _render(item, inner, out)
        sep = ",\n" + inner
    out.append(open_ + close if sep is first else "\n" + indent + close)


__all__ = ["dumps_indented"]
