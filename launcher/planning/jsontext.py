"""Indented JSON text for big values (plans of 100,000 ranks, rank tables of 4,096 servers), fast (pure).

``json.dumps(value, indent=2)`` falls back to the pure-Python encoder whenever ``indent`` is set:
about 3 s for an 80,000-rank plan.  :func:`dumps_indented` gives the same text from orjson's
encoder (a maintained C library) in a tenth of that, and falls back to the rank-table renderer
(:func:`launcher.planning.ranktable.render._render`, same bytes as ``json.dumps``) where orjson
would differ or refuses.
"""
from __future__ import annotations

import json
from typing import Any, List


def dumps_indented(value: Any) -> str:
    """``json.dumps(value, indent=2)``: the same text for values of strings, integers, booleans,
    None, lists and dicts with string keys (what plans and rank tables hold).  Floats are valid
    JSON of the same value but may be spelled differently (``1e-07`` vs ``1e-7``).

    orjson writes non-ASCII characters as UTF-8 where ``json.dumps`` escapes them, refuses
    lone surrogates, integers beyond 64 bits and non-string keys: for those values the slower
    encoders are used, so the result never depends on whether orjson is installed.
    """
    try:
        import orjson
    except ImportError:  # pragma: no cover - a dependency, but the text must not depend on it
        orjson = None
    if orjson is not None:
        try:
            data = orjson.dumps(value, option=orjson.OPT_INDENT_2)
        except (TypeError, ValueError):  # orjson.JSONEncodeError is a TypeError
            data = None
        if data is not None and data.isascii():
            return data.decode("ascii")
    from launcher.planning.ranktable.render import _render

    parts: List[str] = []
    try:
        _render(value, "", parts)
    except TypeError:
        return json.dumps(value, indent=2)
    return "".join(parts)


__all__ = ["dumps_indented"]
