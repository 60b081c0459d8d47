"""A small YAML writer that keeps comments (pure): for manifests meant to be read before use.

PyYAML's dumper drops comments; the manifests ``mslaunch k8s gen`` writes explain the fields that
are not obvious, so they are written here.  Values are dicts (insertion order kept), lists,
strings, ints, bools and None; :class:`Note` attaches a comment to a mapping entry or a list
item (written at the end of a scalar's line, or on its own line above a block).

Every string that is not plainly safe is written as a JSON string (a valid YAML double-quoted
scalar), so ``yaml.safe_load(render(x))`` gives back ``x`` without its notes (the tests check it).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, List, Sequence

import yaml

#: Plain scalars written unquoted: no YAML indicator at the start, no ``: `` or `` #``; and (asked
#: of PyYAML's own resolver) not a word YAML 1.1 reads as a bool, null or number.
_PLAIN = re.compile(r"^[A-Za-z0-9_/.$(][A-Za-z0-9_./:$()\-]*$")
_RESOLVER = yaml.resolver.Resolver()


@dataclass(frozen=True)
class Note:
    """``value`` with a comment (``# text``) written next to it or above it."""

    value: Any
    text: str


def strip_notes(value: Any) -> Any:
    """``value`` with every :class:`Note` replaced by its value (what the YAML parses to)."""
    if isinstance(value, Note):
        return strip_notes(value.value)
    if isinstance(value, dict):
        return {k: strip_notes(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strip_notes(v) for v in value]
    return value


def scalar(value: Any) -> str:
    """One scalar as YAML text."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    text = str(value)
    if (
        _PLAIN.fullmatch(text)
        and not text.endswith(":")
        and _RESOLVER.resolve(yaml.ScalarNode, text, (True, False)) == "tag:yaml.org,2002:str"
    ):
        return text
    return _NON_PRINTABLE.sub(_escape_char, json.dumps(text, ensure_ascii=False))


#: Characters written as escapes in a quoted scalar: those a YAML stream may not hold (YAML 1.1's
#: c-printable, PyYAML's reader), the line breaks YAML folds (NEL, LS, PS) and the BOM.
_NON_PRINTABLE = re.compile(
    "[^\x09\x0a\x0d\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd\U00010000-\U0010ffff]"
)


def _escape_char(m: "re.Match[str]") -> str:
    code = ord(m.group(0))
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _is_block(value: Any) -> bool:
    return isinstance(value, (dict, list, tuple)) and len(value) > 0


def _comment(text: str, indent: str) -> List[str]:
    return [f"{indent}# {line}".rstrip() for line in text.splitlines()]


def _emit(value: Any, indent: int, out: List[str]) -> None:
    pad = " " * indent
    if isinstance(value, dict):
        for key, item in value.items():
            note = None
            if isinstance(item, Note):
                note, item = item.text, item.value
            k = scalar(key)
            if _is_block(item):
                if note:
                    out.extend(_comment(note, pad))
                out.append(f"{pad}{k}:")
                _emit(item, indent + 2 if isinstance(item, dict) else indent, out)
            else:
                line = f"{pad}{k}: {_flow(item)}"
                out.append(line + (f"  # {note}" if note and "\n" not in note else ""))
                if note and "\n" in note:
                    out[-1:-1] = _comment(note, pad)
        return
    for item in value:
        note = None
        if isinstance(item, Note):
            note, item = item.text, item.value
        if note:
            out.extend(_comment(note, pad))
        if isinstance(item, dict) and item:
            sub: List[str] = []
            _emit(item, indent + 2, sub)
            sub[0] = f"{pad}- " + sub[0][indent + 2 :]
            out.extend(sub)
        elif isinstance(item, (list, tuple)) and item:
            sub = []
            _emit(item, indent + 2, sub)
            sub[0] = f"{pad}- " + sub[0][indent + 2 :]
            out.extend(sub)
        else:
            out.append(f"{pad}- {_flow(item)}")


def _flow(value: Any) -> str:
    if isinstance(value, dict):
        return "{}"
    if isinstance(value, (list, tuple)):
        return "[]"
    return scalar(value)


def render(doc: Any, header: str = "") -> str:
    """One YAML document (``header`` as comment lines on top)."""
    out: List[str] = _comment(header, "") if header else []
    _emit(doc, 0, out)
    return "\n".join(out) + "\n"


def render_all(docs: Sequence[Any], header: str = "") -> str:
    """Several documents separated by ``---``; ``header`` comments the first."""
    parts = [render(d, header if i == 0 else "") for i, d in enumerate(docs)]
    return "---\n".join(parts)
