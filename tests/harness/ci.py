"""The skip rule for tests that need real parts (namespaces, Slurm, mpirun, MindSpore).

Outside CI a missing part skips the test with the reason; in CI (``CI`` set to anything but
``""``/``0``/``false``/``no``; ``.ci/run`` sets it) it fails, because ``make test`` installs every
part and CI must run these tests.
"""

from __future__ import annotations

import os

import pytest


def in_ci() -> bool:
    """True when the ``CI`` environment variable says this is a CI run."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def skip_or_fail(reason: str, ci_reason: str = "") -> None:
    """Skip the calling test with ``reason``; in CI fail it (with ``ci_reason`` if given)."""
    if in_ci():
        pytest.fail(ci_reason or f"CI is set but {reason}", pytrace=False)
    pytest.skip(reason)


def require_tool(*names: str, package: str) -> str:
    """The path of the first of ``names`` on PATH; else skip (in CI fail) naming the Debian
    ``package`` that ``make test`` installs."""
    import shutil

    for name in names:
        path = shutil.which(name)
        if path:
            return path
    skip_or_fail(
        f"{names[0]} not installed (apt-get install {package})",
        f"{names[0]} is missing in CI (make test installs {package})",
    )
    raise AssertionError("unreachable")  # skip_or_fail raises
