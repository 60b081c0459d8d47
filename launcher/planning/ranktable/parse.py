"""Rank table JSON in: strict, bounded parsing of a rank table file."""

from __future__ import annotations

import json
import re
from typing import Any, Dict, List, Optional, Tuple

from launcher.errors import RankTableError
from launcher.planning.ranktable.common import RankTableJSONError, clip, json_kind
from launcher.planning.text.textfile import read_text


def parse_rank_table_json(text: str, path: Optional[str] = None) -> Any:
    """Parse rank table JSON text (no checks beyond JSON syntax; see :func:`validate_rank_table`).

    Strict JSON: ``NaN`` / ``Infinity``, numbers that overflow a float or have more digits than
    Python converts, a key repeated in one object, nesting deeper than :data:`MAX_JSON_DEPTH`,
    and strings holding a NUL character or a lone surrogate (``"\\ud800"``) are refused.

    Args:
        text: the file's text.
        path: its name, for messages.

    Returns:
        The parsed JSON value.

    Raises:
        RankTableJSONError: ``path:line:column`` for invalid JSON.
        RankTableError: for each of the refusals above (one line, naming ``path``).
    """
    where = path if path is not None else "<json>"

    def no_duplicates(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
        out: Dict[str, Any] = {}
        for key, value in pairs:
            if key in out:
                raise RankTableError(f"key {json_kind(key)} appears twice in one object; keep one", path=where)
            out[key] = value
        return out

    def no_constant(name: str) -> Any:
        raise RankTableError(f"invalid JSON: {name} is not a JSON number", path=where)

    def finite(literal: str) -> float:
        value = float(literal)
        if value in (float("inf"), float("-inf")):
            raise RankTableError(f"invalid JSON: number {clip(literal)} is too large", path=where)
        return value

    def integer(literal: str) -> int:
        if len(literal) > 100:
            raise RankTableError(f"invalid JSON: number {clip(literal)} has too many digits", path=where)
        return int(literal)

    values = text.count(",") + text.count("[") + text.count("{")
    if values > MAX_JSON_VALUES:
        raise RankTableError(
            f"invalid rank table: about {values} JSON values, more than the {MAX_JSON_VALUES} a table of "
            f"{MAX_TABLE_DEVICES} devices needs",
            path=where,
        )
    try:
        value = json.loads(
            text,
            object_pairs_hook=no_duplicates,
            parse_constant=no_constant,
            parse_float=finite,
            parse_int=integer,
        )
    except json.JSONDecodeError as exc:
        raise RankTableJSONError(f"invalid JSON: {exc.msg}", path=where, line=exc.lineno, column=exc.colno) from None
    except RecursionError:
        raise RankTableError(
            f"invalid rank table: JSON nested deeper than {MAX_JSON_DEPTH} levels", path=where
        ) from None
    except ValueError as exc:  # e.g. an integer literal beyond the digit limit
        raise RankTableError(f"invalid JSON: {str(exc).splitlines()[0] if str(exc) else exc!r}", path=where) from None
    if "\0" in text or _BAD_ESCAPE_RE.search(text):
        _check_json_value(value, where)  # some string may hold NUL or a surrogate: look at every one
    else:
        _check_json_depth(value, where)  # UTF-8 text without such escapes: only the nesting to check
    return value


#: Most devices a rank table may list: 4,096 Atlas A3 servers of 16 devices (8,192 of 8).
MAX_TABLE_DEVICES = 65536
#: Most JSON values (counted as commas and opening brackets, an upper bound) a rank table may
#: hold: a 65,536-device v1.2 table has about 400,000.
MAX_JSON_VALUES = 450_000
#: Deepest nesting :func:`parse_rank_table_json` accepts (a rank table needs 5).
MAX_JSON_DEPTH = 64
#: Largest rank table file read (bytes): a 65,536-device v1.2 table (4,096 A3 servers) is about
#: 12 MB as ``ranktable gen`` writes it (4,096 servers of 8 devices: 3.5 MB in v1.0, 5.5 MB in v1.2).
MAX_RANK_TABLE_BYTES = 16 << 20

_BAD_TEXT_RE = re.compile("[\0\ud800-\udfff]")
#: A JSON escape that can make a NUL or a surrogate (the text itself, decoded from UTF-8, holds no
#: surrogates).  Conservative: ``\\u0000`` written as an escaped backslash also matches.
_BAD_ESCAPE_RE = re.compile(r"\\u(?:0000|[dD][89a-fA-F])")


def _check_json_depth(value: Any, where: str) -> None:
    """Refuse nesting deeper than :data:`MAX_JSON_DEPTH` (the check of :func:`_check_json_value`
    without its look at strings), visiting containers only."""
    stack: List[Tuple[Any, int]] = [(value, 1)] if isinstance(value, (dict, list)) else []
    while stack:
        item, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise RankTableError(f"invalid rank table: JSON nested deeper than {MAX_JSON_DEPTH} levels", path=where)
        for child in item.values() if isinstance(item, dict) else item:
            if isinstance(child, (dict, list)):
                stack.append((child, depth + 1))


def _check_json_value(value: Any, where: str) -> None:
    """Refuse nesting deeper than :data:`MAX_JSON_DEPTH` and strings with NUL or surrogates.

    Iterative (a stack of iterators, one per open container), so nothing recurses into the value
    before its depth is known, and the JSON path is only built for the error.
    """
    names: List[str] = []
    stack: List[Any] = []

    def path(last: Optional[str]) -> str:
        parts = names + ([last] if last is not None else [])
        text = ""
        for part in parts:
            text = text + part if part.startswith("[") or not text else f"{text}.{part}"
        return text or "$"

    def visit(item: Any, name: Optional[str]) -> None:
        if isinstance(item, str):
            bad = _BAD_TEXT_RE.search(item)
            if bad is not None:
                what = "a NUL character" if bad.group() == "\0" else "a lone surrogate (not Unicode text)"
                raise RankTableError(f"{path(name)}: string {clip(item)} holds {what}", path=where)
        elif isinstance(item, (dict, list)):
            if len(stack) >= MAX_JSON_DEPTH:
                raise RankTableError(f"invalid rank table: JSON nested deeper than {MAX_JSON_DEPTH} levels", path=where)
            if name is not None:
                names.append(name)
            stack.append(
                (
                    name is not None,
                    iter(item.items()) if isinstance(item, dict) else enumerate(item),
                    isinstance(item, dict),
                )
            )

    visit(value, None)
    while stack:
        named, items, is_dict = stack[-1]
        entry = next(items, None)
        if entry is None:
            stack.pop()
            if named:
                names.pop()
            continue
        key, child = entry
        if is_dict:
            name = key if _PLAIN_KEY_RE.match(key) else "[key]"
            visit(key, name)
        else:
            name = f"[{key}]"
        visit(child, name)


_PLAIN_KEY_RE = re.compile(r"[A-Za-z0-9_]{1,40}\Z")


def read_rank_table(path: str) -> Any:
    """Read and parse one rank table file.

    Args:
        path: the JSON file.

    Returns:
        The parsed JSON value (validate it with :func:`validate_rank_table`).

    Raises:
        RankTableError: the file is missing, a directory, unreadable, not UTF-8, or not JSON.
    """
    text = read_text(path, RankTableError, "no such rank table file", "a rank table file", limit=MAX_RANK_TABLE_BYTES)
    return parse_rank_table_json(text, path=path)
