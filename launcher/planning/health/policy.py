"""The health check's flags, checked (pure, and light: every ``run`` checks its ``--preflight``,
``--device-checks`` and ``--health-threshold`` values before anything runs, and needs none of the
checks themselves for that)."""

from __future__ import annotations

from typing import Optional

from launcher.errors import PlanError

__all__ = [
    "DEFAULT_POLICY",
    "DEFAULT_THRESHOLD",
    "DEVICE_CHECK_POLICIES",
    "PREFLIGHT_MODES",
    "check_mode",
    "check_policy",
    "check_threshold",
]

#: ``--preflight MODE``: what a slow or faulty host does to the job.
PREFLIGHT_MODES = ("exclude", "warn", "fail")
#: ``--device-checks``: ``off`` runs none; ``try`` (the default) runs them and fails a host on a
#: faulty device only; ``require`` also fails a host whose planned devices could not be checked.
DEVICE_CHECK_POLICIES = ("off", "try", "require")
DEFAULT_POLICY = "try"
#: ``--health-threshold``: a host below this fraction of the hosts' median is slow.
DEFAULT_THRESHOLD = 0.5


def check_policy(value: str) -> str:
    """``--device-checks``'s value, lower case.

    Raises:
        PlanError: not one of :data:`DEVICE_CHECK_POLICIES`.
    """
    policy = value.strip().lower()
    if policy not in DEVICE_CHECK_POLICIES:
        raise PlanError(
            f"unknown --device-checks {value!r}; use one of {', '.join(DEVICE_CHECK_POLICIES)}", field="--device-checks"
        )
    return policy


def check_mode(mode: Optional[str]) -> Optional[str]:
    """``--preflight``'s value (None: no check).

    Raises:
        PlanError: not one of :data:`PREFLIGHT_MODES`.
    """
    if mode is not None and mode not in PREFLIGHT_MODES:
        raise PlanError(
            f"unknown --preflight mode {mode!r}; use one of {', '.join(PREFLIGHT_MODES)}", field="--preflight"
        )
    return mode


def check_threshold(threshold: float) -> float:
    """``--health-threshold``'s value.

    Raises:
        PlanError: not strictly between 0 and 1.
    """
    if not 0.0 < threshold < 1.0:
        raise PlanError(
            f"--health-threshold must be between 0 and 1 (a fraction of the median), got {threshold:g}",
            field="--health-threshold",
        )
    return threshold
