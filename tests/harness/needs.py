"""``pytest.mark.needs(...)``: what a unit test needs beyond the dev extra, checked before it runs.

``@pytest.mark.needs("ssh-keygen")``, ``needs("installed")``, ``needs("import-linter")``,
``needs("root")``, ``needs("cc")`` (a C compiler),
``needs("prometheus")`` (the Prometheus server, Debian's ``prometheus``)
(several names: all of them).  A missing need skips the test with its reason;
in CI it fails (:func:`tests.harness.ci.skip_or_fail`), because ``make test`` provides every one.
Unknown names stop the run at collection (:func:`check_names`).  MindSpore has its own marker,
``mindspore`` (:mod:`tests.harness.mindspore`).
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import Callable, Dict, Iterable, Tuple

from tests.harness.ci import skip_or_fail


def _installed() -> bool:
    from importlib import metadata

    try:
        metadata.version("mslaunch")
    except metadata.PackageNotFoundError:
        return False
    return True


LINT_IMPORTS = os.path.join(os.path.dirname(sys.executable), "lint-imports")

#: name -> (whether it is there, the reason to skip without it, what CI is missing)
NEEDS: Dict[str, Tuple[Callable[[], bool], str, str]] = {
    "ssh-keygen": (
        lambda: shutil.which("ssh-keygen") is not None,
        "ssh-keygen not installed (apt-get install openssh-client)",
        "ssh-keygen is missing in CI (make test installs openssh-client)",
    ),
    "installed": (
        _installed,
        "mslaunch is not installed as a distribution (pip install -e .)",
        "the mslaunch distribution is missing in CI (make test installs it)",
    ),
    "import-linter": (
        lambda: os.path.isfile(LINT_IMPORTS),
        f"{LINT_IMPORTS} missing (pip install -e '.[dev]')",
        "lint-imports is missing in CI (make test installs the [dev] extra)",
    ),
    "root": (lambda: os.geteuid() == 0, "needs root", "CI runs the tests as root"),
    "cc": (
        lambda: shutil.which("cc") is not None,
        "no C compiler (apt-get install gcc libc6-dev)",
        "cc is missing in CI (make test installs gcc and libc6-dev)",
    ),
    "prometheus": (
        lambda: shutil.which("prometheus") is not None,
        "the Prometheus server is not installed (apt-get install prometheus)",
        "prometheus is missing in CI (make test installs the Debian package prometheus)",
    ),
}


def check_names(names: Iterable[str], where: str) -> None:
    """Raise ValueError naming ``where`` for a name :data:`NEEDS` does not know."""
    unknown = sorted(set(names) - set(NEEDS))
    if unknown:
        raise ValueError(f"{where}: pytest.mark.needs{tuple(unknown)}: unknown; known: {', '.join(NEEDS)}")


def require(*names: str) -> None:
    """Skip (in CI fail) the calling test unless every one of ``names`` is there."""
    for name in names:
        present, reason, ci_reason = NEEDS[name]
        if not present():
            skip_or_fail(reason, ci_reason)
