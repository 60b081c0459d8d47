"""What end-to-end tests with real MindSpore share: whether it is installed, and the skip rule.

``HAVE_MS`` is found without importing MindSpore (an import costs seconds and hundreds of MB in
the test process). Outside CI a missing MindSpore skips with the reason; in CI (``CI`` set) it
fails, because ``make test`` installs the ``[train]`` extra and CI must run these tests.
"""

from __future__ import annotations

import importlib.util

from tests.harness.ci import skip_or_fail


def _have_ms() -> bool:
    try:
        return importlib.util.find_spec("mindspore") is not None
    except ImportError:  # a finder that refuses it (tests/harness/test_markers_truthful.py)
        return False


HAVE_MS = _have_ms()


def require_mindspore(*, also: bool = True, what: str = "mindspore") -> None:
    """Skip (or in CI fail) the calling test unless MindSpore is installed and ``also`` holds.

    Args:
        also: a further prerequisite the caller checked (e.g. ``msrun`` is executable).
        what: how the message names what is missing.
    """
    if HAVE_MS and also:
        return
    skip_or_fail(
        f"{what} not installed (pip install -e '.[train]')",
        f"{what} is missing in CI (make test installs the [train] extra)",
    )
