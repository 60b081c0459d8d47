"""What end-to-end tests with real MindSpore share: whether it is installed, and the skip rule.

``HAVE_MS`` is found without importing MindSpore (an import costs seconds and hundreds of MB in
the test process). Outside CI a missing MindSpore skips with the reason; in CI (``CI`` set) it
fails, because ``make test`` installs the ``[train]`` extra and CI must run these tests.
"""

from __future__ import annotations

import importlib.util
import json
import os
from typing import Dict, Optional

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


#: A launcher's variables in a rank's environment: a test that runs the trainer itself leaves them out.
LAUNCHER_VARS = ("MS_ROLE", "RANK_TABLE_FILE", "OMPI_COMM_WORLD_SIZE", "DEVICE_TARGET")


def trainer_env() -> Dict[str, str]:
    """The environment of a trainer a test starts itself, outside mslaunch: this one without a
    launcher's variables (a rank's role, a rank table, an mpirun world), and oneDNN's ISA capped
    as mslaunch's CPU tuning caps it for its ranks where oneDNN's default is its reference kernel
    (an AVX-512 CPU: 9-20x slower steps, docs/cpu-performance.md); a CPU whose best is AVX2 or
    less runs as before, and a cap of the caller's own wins."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}
    if "ONEDNN_MAX_CPU_ISA" not in env and "DNNL_MAX_CPU_ISA" not in env:
        env["ONEDNN_MAX_CPU_ISA"] = "AVX2"
    return env


def crashed_after_leaving(job_dir: str) -> Optional[str]:
    """Why a job failed, when the failure is MindSpore 2.10's exit cleanup and nothing else: the
    job's root cause (summary.json) is a native crash of a rank after it left the cluster
    (launcher/logs/causerules/errorlines.py: the scheduler had logged its unregistration, so its
    program had ended and its atexit handlers had run). Else None.

    Seen in 2 of 12 runs of the suite, in 2-rank jobs under its load (a user's script, and the
    trainer when it still ended through that cleanup); 0 in 56 jobs of the same script here alone.
    A test whose subject is that full exit runs its job once more then and says why; a second
    failure fails it."""
    try:
        with open(os.path.join(job_dir, "summary.json")) as f:
            root = json.load(f).get("root_cause") or {}
    except (OSError, ValueError, AttributeError):
        return None
    cause = root.get("cause") or {}
    if cause.get("kind") != "native_crash" or "after it left the cluster" not in cause.get("evidence", ""):
        return None
    return f"{root.get('name')}: {cause['evidence'].split(' (the scheduler')[0]} (MindSpore's exit cleanup)"
