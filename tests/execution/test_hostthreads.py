"""The hosts' own thread decisions said on the console and merged (no hosts needed)."""

from __future__ import annotations

import json
import threading
from types import SimpleNamespace

from launcher.execution.hostthreads import HostThreadsWatch, NoteSettings, watch_host_threads
from tests.harness.faultkit import wait_for


def _record(folder, host, notes, warnings=()):
    folder.mkdir(exist_ok=True)
    (folder / f"{host}.json").write_text(json.dumps({"host": host, "notes": list(notes), "warnings": list(warnings)}))


def test_each_hosts_lines_are_said_once_and_the_records_merged(tmp_path) -> None:
    said, lock = [], threading.Lock()

    def note(line):
        with lock:
            said.append(line)

    folder = tmp_path / "host-threads"
    watch = HostThreadsWatch(str(tmp_path), note, interval=0.02).start()
    _record(folder, "h1", ["h1: threads per rank 1"], ["h1: 2 ranks on 1 usable core(s)"])
    (folder / "h2.json").write_text('{"host": "h2", "no')  # half-written: read when whole
    (folder / ".h3.json.123").write_text("{}")  # a wrapper's temp file
    (folder / "h4.json.77.tmp").write_text("{}")  # the shim's temp file
    wait_for(lambda: len(said) == 2, 10)
    _record(folder, "h2", ["h2: threads per rank 2"])
    wait_for(lambda: len(said) == 3, 10)
    _record(folder, "h1", ["h1: rewritten"])  # said once per attempt
    watch.close()
    assert said == [
        "cpu: h1: threads per rank 1",
        "warning: h1: 2 ranks on 1 usable core(s)",
        "cpu: h2: threads per rank 2",
    ]
    merged = json.loads((tmp_path / "host-threads.json").read_text())
    assert sorted(merged) == ["h1", "h2"] and merged["h2"]["notes"] == ["h2: threads per rank 2"]


def test_records_after_the_last_look_are_read_at_close_and_nothing_is_written_without_any(tmp_path) -> None:
    said = []
    watch = HostThreadsWatch(str(tmp_path), said.append, interval=60).start()
    _record(tmp_path / "host-threads", "n1", ["n1: threads per rank 4"])
    watch.close()
    assert said == ["cpu: n1: threads per rank 4"] and (tmp_path / "host-threads.json").exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    HostThreadsWatch(str(empty), said.append, interval=60).start().close()
    assert not (empty / "host-threads.json").exists()


def test_a_watch_only_where_the_plan_leaves_threads_to_the_hosts(tmp_path) -> None:
    said = []
    ctx = SimpleNamespace(plan=SimpleNamespace(host_threads=()), settings_for=lambda name: NoteSettings(said.append))
    assert watch_host_threads(ctx, "slurm", str(tmp_path)) is None
    ctx.plan.host_threads = ("h1",)
    watch = watch_host_threads(ctx, "slurm", str(tmp_path))
    _record(tmp_path / "host-threads", "h1", ["h1: x"])
    watch.close()
    assert said == ["cpu: h1: x"]
    quiet = watch_host_threads(
        SimpleNamespace(plan=ctx.plan, settings_for=lambda name: None), "mpirun", str(tmp_path / "q")
    )
    quiet.close()  # no console: nothing said, nothing fails
