"""Every fenced ``bash`` block of README.md and docs/*.md runs, as written, and succeeds.

Blocks run with ``bash -euo pipefail`` in a scratch folder that holds what the docs' command
lines name: ``train.py`` / ``net.py`` (a stand-in training script, :mod:`tests.docs.standin_train`),
``hostfiles/`` (the repository's examples), ``hosts.txt`` and ``hccn/`` (hccn.conf copies for the
hosts the docs name), with ``mslaunch`` and ``python`` of this interpreter first on PATH.  Blocks
that bring up a namespace cluster or the test Slurm cluster run where those can run (root, CI);
blocks that run MindSpore need it.  Blocks that cannot run here are listed, with the reason, in
:mod:`tests.docs.exempt`.  After a block no process it started may be left running.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Dict, List, NamedTuple

import pytest

from tests.docs.exempt import EXEMPT
from tests.harness.ci import require_tool
from tests.harness.conftest_netns import require_netns

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\s*$")

#: Environment a block needs beyond the scratch folder, by (page, first command line).
BLOCK_ENV: Dict[tuple, Dict[str, str]] = {
    ("inventories.md", 'mslaunch ranktable gen --hosts "$SLURM_JOB_NODELIST" --hccn-dir hccn/ -o rank_table.json'): {
        "SLURM_JOB_NODELIST": "node[01-04]"
    },
}
#: Hosts that get an hccn.conf in the scratch folder's ``hccn/`` (names the docs use).
HCCN_HOSTS = ["10.0.0.1", "10.0.0.2", "node1", "node2"] + [f"node0{i}" for i in range(1, 5)]


class Block(NamedTuple):
    page: str
    line: int
    text: str

    @property
    def key(self) -> tuple:
        return (self.page, first_command(self.text))


def first_command(text: str) -> str:
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            return line
    return ""


def blocks_of(path: Path) -> List[Block]:
    """The ``bash`` blocks of a Markdown page, with the line each starts on."""
    out: List[Block] = []
    lang, start, body = None, 0, []  # type: ignore[var-annotated]
    for no, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        m = FENCE.match(line)
        if lang is None and m:
            lang, start, body = m.group(1), no, []
        elif lang is not None and line.startswith("```"):
            if lang == "bash":
                out.append(Block(path.name, start, "\n".join(body) + "\n"))
            lang = None
        elif lang is not None:
            body.append(line)
    return out


ALL_BLOCKS = [b for p in PAGES for b in blocks_of(p)]


def _params():
    for b in ALL_BLOCKS:
        if b.key in EXEMPT:
            continue
        marks = []
        if "tests.harness.netns_cluster" in b.text:
            marks.append(pytest.mark.netns)
        if "tests.harness.slurm_cluster" in b.text:
            marks.append(pytest.mark.slurm)
        if "launcher.workloads." in b.text or "mslaunch check" in b.text:
            marks.append(pytest.mark.mindspore)
        yield pytest.param(b, id=f"{b.page}:{b.line}", marks=marks)


def _hccn_conf(index: int) -> str:
    return "".join(f"address_{d}=192.{d + 1}.{index}.6\nnetmask_{d}=255.255.255.0\n" for d in range(8))


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    for name in ("train.py", "net.py"):
        shutil.copy(Path(__file__).with_name("standin_train.py"), work / name)
    os.symlink(ROOT / "hostfiles", work / "hostfiles")
    (work / "hccn").mkdir()
    for i, host in enumerate(HCCN_HOSTS, 1):
        (work / "hccn" / f"{host}.conf").write_text(_hccn_conf(i))
    (work / "hosts.txt").write_text("10.0.0.1 slots=8\n10.0.0.2 slots=8\n")
    return work


def _pids_with(token: str) -> List[int]:
    """Live processes whose environment carries ``DOCS_BLOCK_TOKEN=token``."""
    needle = f"DOCS_BLOCK_TOKEN={token}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                env = fh.read()
            with open(f"/proc/{entry}/stat", "rb") as fh:
                state = fh.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if state != b"Z" and needle in env.split(b"\0"):
            found.append(int(entry))
    return found


@pytest.mark.parametrize("block", list(_params()))
def test_docs_block_runs(block: Block, scratch: Path) -> None:
    if "tests.harness.netns_cluster" in block.text or "tests.harness.slurm_cluster" in block.text:
        require_netns()
    if "tests.harness.slurm_cluster" in block.text:
        require_tool("slurmctld", package="slurmctld")
    token = uuid.uuid4().hex
    env = dict(os.environ)
    env.update(BLOCK_ENV.get(block.key, {}))
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(ROOT)
    env["DOCS_BLOCK_TOKEN"] = token
    argv = ["bash", "-euo", "pipefail", "-c", block.text]
    if not _needs_root_namespace(block) and _can_unshare_net():
        # A network namespace of its own (loopback only): the docs' default ports (8118) never meet
        # another test's job, and nothing the block starts reaches beyond this machine.
        argv = ["unshare", "--net", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *argv]
    proc = subprocess.Popen(
        argv, cwd=scratch, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        out, _ = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"{block.page}:{block.line} did not finish in 300 s:\n{out[-3000:]}")
    finally:
        _cleanup(block)
    assert proc.returncode == 0, f"{block.page}:{block.line} exited {proc.returncode}:\n{out[-4000:]}"
    deadline = time.monotonic() + 30
    left = _pids_with(token)
    while left and time.monotonic() < deadline:  # a stopped job's processes may still be exiting
        time.sleep(0.2)
        left = _pids_with(token)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert left == [], f"{block.page}:{block.line} left processes running: {left}"


def _needs_root_namespace(block: Block) -> bool:
    """Blocks that build a namespace or Slurm test cluster work in this machine's own namespace."""
    return "tests.harness.netns_cluster" in block.text or "tests.harness.slurm_cluster" in block.text


_UNSHARE: List[bool] = []


def _can_unshare_net() -> bool:
    if not _UNSHARE:
        ok = os.geteuid() == 0 and shutil.which("unshare") is not None and shutil.which("ip") is not None
        if ok:
            ok = subprocess.run(["unshare", "--net", "true"], capture_output=True, timeout=30).returncode == 0
        _UNSHARE.append(ok)
    return _UNSHARE[0]


def _cleanup(block: Block) -> None:
    """Take down a cluster a block brought up, if the block failed before its own 'down'."""
    for harness in ("netns_cluster", "slurm_cluster"):
        for m in re.finditer(rf"tests\.harness\.{harness} up .*?--dir (\S+)", block.text):
            folder = m.group(1)
            if os.path.exists(os.path.join(folder, "state.json")) or (
                harness == "slurm_cluster" and os.path.isdir(folder)
            ):
                subprocess.run(
                    [sys.executable, "-m", f"tests.harness.{harness}", "down", "--dir", folder],
                    cwd=ROOT,
                    capture_output=True,
                    timeout=120,
                )


def test_every_exemption_names_a_block() -> None:
    keys = {b.key for b in ALL_BLOCKS}
    stale = [k for k in EXEMPT if k not in keys]
    assert stale == [], f"exemptions that name no docs block any more: {stale}"
    assert all(reason.strip() for reason in EXEMPT.values())


def test_every_docs_page_is_linked_from_the_readme() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(docs/([\w.-]+\.md)\)", readme))
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert pages - linked == set(), "docs pages the README does not link"
    assert linked - pages == set(), "README links to docs pages that do not exist"


def test_links_between_pages_resolve() -> None:
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([\w./-]+\.md)(?:#[\w-]*)?\)", text):
            assert (page.parent / target).is_file(), f"{page.name} links to {target}, which does not exist"


def test_the_readme_is_a_landing_page() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200
    setup = [line for line in lines if re.match(r"^make (run|test)\b", line)]
    assert [line.split()[1] for line in setup] == ["run", "test"]


def test_make_run_runs_the_documented_commands() -> None:
    """The exempt 'make run' block of workload.md is what the Makefile's run target runs."""
    block = next(b for b in ALL_BLOCKS if b.page == "workload.md" and b.key in EXEMPT)
    documented = [
        re.sub(r"\s+", " ", c.replace("\\\n", " ")).strip() for c in block.text.split("\nmslaunch ") if c.strip()
    ]
    make = subprocess.run(
        ["make", "-n", "run", "PY=python", "VENV=.venv"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "MAKEFLAGS": ""},
    )
    assert make.returncode == 0, make.stderr
    ran = re.sub(r"\s+", " ", make.stdout.replace("\\\n", " "))
    for cmd in documented:
        cmd = cmd if cmd.startswith("mslaunch ") else "mslaunch " + cmd
        args = cmd.split(" ", 1)[1]
        assert args in ran, f"make run does not run: {cmd}"


def test_make_run_installs_no_debian_package() -> None:
    """`make run` needs pip only: its recipe (and its prerequisites') runs no apt-get or dpkg."""
    make = subprocess.run(
        ["make", "-n", "-B", "run", "VENV=.venv-dry"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "MAKEFLAGS": ""},
    )
    assert make.returncode == 0, make.stderr
    assert "pip install" in make.stdout and "mslaunch run" in make.stdout
    assert "apt-get" not in make.stdout and "dpkg" not in make.stdout
    test = subprocess.run(
        ["make", "-n", "-B", "test", "VENV=.venv-dry"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "MAKEFLAGS": ""},
    )
    assert "apt-get" in test.stdout  # the check can fail: make test does install the real parts
