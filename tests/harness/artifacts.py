"""What a failed test leaves for whoever reads CI's output: its temporary folder (the job
directories, rank logs, summaries and events it made) copied to ``test-artifacts/<test>/`` in the
clone, and that path printed in the failure's report.

pytest keeps a failed test's ``tmp_path`` too, but under ``/tmp/pytest-of-<user>`` of whichever
pytest-xdist worker ran it, named by nothing in the output, and only for the last three runs.
The copy skips what cannot be copied (sockets, FIFOs, dangling links) and stops at
:data:`MAX_BYTES` so one test's output cannot fill the disk.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
from typing import Any, List, Optional

import pytest

from tests.harness.paths import REPO

#: Where the copies go (gitignored; ``MSLAUNCH_TEST_ARTIFACTS`` moves them).
ARTIFACTS = os.environ.get("MSLAUNCH_TEST_ARTIFACTS") or os.path.join(REPO, "test-artifacts")
#: At most this many bytes are copied per failed test.
MAX_BYTES = 200 << 20


def folder_for(nodeid: str) -> str:
    """``test-artifacts/<nodeid with every unsafe character as _>`` (at most 150 characters)."""
    return os.path.join(ARTIFACTS, re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid)[:150])


def keep(src: str, nodeid: str, limit: int = MAX_BYTES) -> Optional[str]:
    """Copy ``src`` (a test's tmp_path) to :func:`folder_for`; its path, or None when nothing was
    there.  Regular files, folders and symlinks (as links) only; past ``limit`` bytes the rest of
    the files are left out and a ``NOT-COPIED.txt`` lists them."""
    if not os.path.isdir(src):
        return None
    dest = folder_for(nodeid)
    shutil.rmtree(dest, ignore_errors=True)
    copied = 0
    skipped: List[str] = []
    for root, dirs, files in os.walk(src):
        rel = os.path.relpath(root, src)
        out = os.path.normpath(os.path.join(dest, rel))
        os.makedirs(out, exist_ok=True)
        for name in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            path = os.path.join(root, name)
            try:
                st = os.lstat(path)
                if stat.S_ISLNK(st.st_mode):
                    os.symlink(os.readlink(path), os.path.join(out, name))
                elif stat.S_ISREG(st.st_mode):
                    if copied + st.st_size > limit:
                        skipped.append(os.path.join(rel, name))
                        continue
                    shutil.copy2(path, os.path.join(out, name))
                    copied += st.st_size
            except OSError:
                skipped.append(os.path.join(rel, name))
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(root, d))]
    if skipped:
        with open(os.path.join(dest, "NOT-COPIED.txt"), "w", encoding="utf-8") as fh:
            fh.write("\n".join(skipped) + "\n")
    return dest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: Any, call: Any) -> Any:
    """A failed test's temporary folder (its job directories and logs) is copied into the clone's
    ``test-artifacts/`` and the report names it (:mod:`tests.harness.artifacts`)."""
    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    tmp = item.funcargs.get("tmp_path") if hasattr(item, "funcargs") else None
    if tmp is None:
        return
    try:
        kept = keep(str(tmp), item.nodeid)
    except OSError as exc:
        report.sections.append(("kept", f"could not keep {tmp}: {exc}"))
        return
    if kept is not None:
        report.sections.append(("kept", f"this test's job directories and logs: {kept}"))
