"""A failed test leaves its temporary folder where the run's output names it (tests/harness/artifacts.py)."""

import os
import subprocess
import sys

import pytest

from tests.harness.artifacts import keep
from tests.harness.paths import REPO


def test_keep_copies_files_and_links_and_lists_what_it_left(tmp_path, monkeypatch):
    monkeypatch.setattr("tests.harness.artifacts.ARTIFACTS", str(tmp_path / "out"))
    src = tmp_path / "src"
    (src / "job" / "attempt-1").mkdir(parents=True)
    (src / "job" / "summary.json").write_text('{"status": "failed"}')
    (src / "job" / "attempt-1" / "worker_0.log").write_text("x" * 100)
    (src / "job" / "big.bin").write_bytes(b"y" * 5000)
    os.symlink("summary.json", src / "job" / "link")
    os.mkfifo(src / "job" / "fifo")
    dest = keep(str(src), "tests/a/test_b.py::test_c[1-2]", limit=1000)
    assert dest == str(tmp_path / "out" / "tests_a_test_b.py_test_c_1-2_")
    assert open(os.path.join(dest, "job", "summary.json")).read() == '{"status": "failed"}'
    assert open(os.path.join(dest, "job", "attempt-1", "worker_0.log")).read() == "x" * 100
    assert os.readlink(os.path.join(dest, "job", "link")) == "summary.json"
    assert not os.path.exists(os.path.join(dest, "job", "big.bin"))
    assert not os.path.exists(os.path.join(dest, "job", "fifo"))
    assert open(os.path.join(dest, "NOT-COPIED.txt")).read().split() == ["job/big.bin"]
    assert keep(str(tmp_path / "missing"), "t") is None


@pytest.mark.e2e  # a child pytest
def test_a_failed_tests_report_names_the_kept_folder(tmp_path):
    """A child pytest with the suite's hook: the failing test's report names its copy, which holds
    what the test wrote; a passing test keeps nothing."""
    (tmp_path / "conftest.py").write_text(
        "from tests.harness.artifacts import pytest_runtest_makereport  # noqa: F401\n"
    )
    (tmp_path / "test_child.py").write_text(
        "def test_fails(tmp_path):\n"
        "    (tmp_path / 'worker_0.log').write_text('rank 0 died')\n"
        "    assert False\n\n"
        "def test_passes(tmp_path):\n"
        "    (tmp_path / 'x').write_text('x')\n"
    )
    out = tmp_path / "artifacts"
    env = dict(os.environ, PYTHONPATH=REPO, MSLAUNCH_TEST_ARTIFACTS=str(out))
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "-q", "test_child.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 1, r.stdout + r.stderr
    kept = out / "test_child.py_test_fails"
    assert f"this test's job directories and logs: {kept}" in r.stdout
    assert (kept / "worker_0.log").read_text() == "rank 0 died"
    assert sorted(os.listdir(out)) == ["test_child.py_test_fails"]
