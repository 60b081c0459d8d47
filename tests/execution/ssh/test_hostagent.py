"""launcher.execution.ssh.hostagent: the rank logs it writes on this machine."""

from __future__ import annotations

import os

from launcher.execution.ssh.hostagent import LogFiles


def test_rank_logs_are_0600_whatever_the_umask(tmp_path):
    """A remote rank's output (which may print its environment: --env values) lands in a 0600 file."""
    logs = LogFiles(max_open=1)
    old = os.umask(0o022)
    try:
        for name in ("worker_0.log", "worker_1.log", "worker_0.log"):  # the LRU closes and reopens
            logs.write(str(tmp_path / name), f"{name} HF_TOKEN=hf_secret\n".encode())
    finally:
        os.umask(old)
        logs.close()
    assert (tmp_path / "worker_0.log").read_text() == "worker_0.log HF_TOKEN=hf_secret\n" * 2
    assert sorted(oct(p.stat().st_mode & 0o777) for p in tmp_path.iterdir()) == ["0o600", "0o600"]
