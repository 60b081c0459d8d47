"""``--min-hosts`` and ``--rejoin-after``: parsed once, bad values refused in one line."""

from __future__ import annotations

import pytest

from launcher.cli.elastic_flags import parse_rejoin_after
from launcher.errors import PlanError
from launcher.execution.settings import ElasticSettings
from tests.harness.cli import run_cli


@pytest.mark.parametrize("text, want", [(None, 300.0), ("0", 0.0), ("90.5", 90.5), ("off", None), ("OFF", None)])
def test_rejoin_after(text, want):
    assert parse_rejoin_after(text) == want


@pytest.mark.parametrize("text", ["-1", "soon", "inf", "nan"])
def test_rejoin_after_refuses(text):
    with pytest.raises(PlanError, match="--rejoin-after .*expected seconds >= 0, or off") as err:
        parse_rejoin_after(text)
    assert err.value.field == "--rejoin-after"


def test_min_hosts_below_one_is_refused():
    with pytest.raises(PlanError, match="--min-hosts must be >= 1") as err:
        ElasticSettings(min_hosts=0)
    assert err.value.field == "--min-hosts"


@pytest.mark.parametrize(
    "flags, says",
    [(["--min-hosts", "0"], "--min-hosts must be >= 1"), (["--rejoin-after", "later"], "--rejoin-after 'later'")],
)
def test_the_cli_refuses_in_one_line_before_anything_runs(tmp_path, flags, says):
    r = run_cli("run", "--np", "2", *flags, "--dry-run", "--", "true", cwd=tmp_path)
    assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "mslaunch_logs").exists()
