"""``run``'s ``--preflight``, ``--device-checks`` and ``--health-threshold`` reach the health check
(its bad values are tests/cli/bad_run_options.py's; the check itself on real hosts is
tests/integration/test_health_cluster.py's and test_health_slurm.py's)."""

from __future__ import annotations

import pytest

from tests.cli.test_ssh_flags import Stop, invoke


@pytest.mark.parametrize(
    "flags, want",
    [
        (["--preflight", "warn"], ("warn", "try", 0.5)),
        (
            ["--preflight", "exclude", "--device-checks", "require", "--health-threshold", "0.2"],
            ("exclude", "require", 0.2),
        ),
    ],
)
def test_the_preflight_flags_reach_the_check(monkeypatch, tmp_path, flags, want):
    from launcher.cli import health

    seen = []

    def preflight(mode, spec, plan, ssh, device_checks, min_hosts, threshold):  # noqa: ANN001, ANN202  (a stand-in)
        seen.append((mode, device_checks, threshold))
        raise Stop("stopped by the test")

    monkeypatch.setattr(health, "preflight", preflight)
    r = invoke(["run", "--np", "1", "--cpu-tune", "off", *flags, "x.py"], monkeypatch, tmp_path)
    assert isinstance(r.exception, Stop), r.output
    assert seen == [want]
