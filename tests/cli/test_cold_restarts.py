"""``--cold-restarts``: the CLI hands the local backend ``keep_zygote=False``, and the local
backend then gives the zygote no pool, so a restart imports in a new zygote instead of forking
from the last attempt's.  (That a pool's kept zygote is what a restart forks from, and when it is
refused, is tests/execution/local/test_zygote.py's; that the user's ``MS_COMPILER_CACHE_ENABLE=0``
turns the trainer's cache off is tests/workloads/test_compile_cache.py's.  The warm default's
restart with real MindSpore is tests/integration/test_restart_warm.py's.)"""

from __future__ import annotations

import pytest

from launcher.execution.backend import BackendContext
from launcher.execution.local import zygote as zygote_mod
from launcher.execution.local.backend import LocalBackend, LocalSettings
from tests.cli.test_ssh_flags import Stop, invoke, recorder


@pytest.mark.parametrize("flags, keep", [([], True), (["--cold-restarts"], False)])
def test_run_hands_the_local_backend_whether_a_restart_keeps_the_zygote(monkeypatch, tmp_path, flags, keep):
    from launcher.execution import runner

    seen = []
    monkeypatch.setattr(runner, "run_plan", recorder(seen))
    r = invoke(["run", "--np", "1", "--cpu-tune", "off", *flags, "x.py"], monkeypatch, tmp_path)
    assert isinstance(r.exception, Stop), r.output
    local = seen[0][1]["backend_settings"]["local"]
    assert isinstance(local, LocalSettings) and local.keep_zygote is keep


@pytest.mark.parametrize("keep", [True, False])
def test_without_keep_zygote_the_zygote_gets_no_pool(monkeypatch, keep):
    got = []
    monkeypatch.setattr(zygote_mod.ZygoteBackend, "warm", classmethod(lambda cls, *a, **kw: got.append(kw) or "z"))
    settings = LocalSettings(zygote=True, keep_zygote=keep)
    ctx = BackendContext(plan=None, settings={"local": settings})  # type: ignore[arg-type]
    monkeypatch.setattr(zygote_mod, "shared_env", lambda plan: {})
    assert LocalBackend.create(ctx) == "z"
    assert got[0]["pool"] is (settings.pool if keep else None)
