"""Every ``# type: ignore`` in launcher/ names its error code and says why on the same line:
``# type: ignore[attr-defined]  # os.pidfd_open is 3.9+ Linux only``.

mypy (``make lint``) reports the ignores that no longer silence anything; this test keeps the
ones that do explained.
"""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path
from typing import List, Tuple

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAUNCHER = ROOT / "launcher"

#: ``type: ignore``, its codes (``[a, b]``), and what follows on the comment
_IGNORE_RE = re.compile(r"type:\s*ignore(?P<codes>\[[^\]]*\])?(?P<rest>.*)$")
#: what the reason must hold after the codes: another comment with some words
_REASON_RE = re.compile(r"^\s*#\s*\S.*\w")


def bad_ignores(source: str) -> List[Tuple[int, str]]:
    """``(line, comment)`` of each ``# type: ignore`` comment in ``source`` without an error code
    or without a reason after it."""
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type != tokenize.COMMENT:
            continue
        m = _IGNORE_RE.search(tok.string)
        if m is None:
            continue
        if not m.group("codes") or m.group("codes") == "[]" or not _REASON_RE.match(m.group("rest")):
            out.append((tok.start[0], tok.string))
    return out


def _launcher_files() -> List[Path]:
    return sorted(LAUNCHER.rglob("*.py"))


@pytest.mark.heavy
def test_every_ignore_has_a_code_and_a_reason() -> None:
    problems = []
    for path in _launcher_files():
        rel = path.relative_to(ROOT).as_posix()
        problems += [f"{rel}:{line}: {comment}" for line, comment in bad_ignores(path.read_text(encoding="utf-8"))]
    assert not problems, "a `# type: ignore` needs [code] and `# why` after it:\n" + "\n".join(problems)


@pytest.mark.parametrize(
    "line, bad",
    [
        ("x = f()  # type: ignore", True),
        ("x = f()  # type: ignore[attr-defined]", True),
        ("x = f()  # type: ignore[attr-defined]  #", True),
        ("x = f()  # type: ignore[]  # why", True),
        ("x = f()  # type: ignore  # why", True),
        ("x = f()  # type: ignore[attr-defined]  # os.pidfd_open is 3.9+ Linux only", False),
        ("x = f()  # type: ignore[arg-type,union-attr]  # checked above", False),
        ("x = f()  # type: dict[str, int]", False),
        ('x = "# type: ignore"', False),  # in a string, not a comment
    ],
)
def test_bad_ignores(line: str, bad: bool) -> None:
    assert bool(bad_ignores(line + "\n")) is bad
