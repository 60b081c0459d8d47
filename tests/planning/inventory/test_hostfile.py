"""Differential test: a corpus of hostfiles read by the installed OpenMPI (``mpirun``) and by
mslaunch, compared host by host (slots, max_slots, SSH user and port).

OpenMPI is asked inside a private network namespace with only a loopback interface, with an rsh
agent that records its arguments and fails (``tests/harness/ompi_hostfile_probe.py``): nothing
is started and no name lookup leaves the namespace. The host names are made up (``nodea``) or
from TEST-NET-1 (192.0.2.0/24).

Every case says what is expected: ``SAME`` (both read it, with the same meaning), ``REFUSED``
(both refuse it) or a :class:`Differs` with the reason mslaunch deliberately differs; a
``Differs`` case must really differ, so the list stays true when OpenMPI changes.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple, Union

import pytest

from launcher.errors import InventoryError
from launcher.planning.inventory.hostfile import MAX_SLOTS_KEYS, SLOTS_KEYS, USER_KEYS, parse_hostfile
from tests.harness.ci import require_tool, skip_or_fail
from tests.harness.ompi_hostfile_probe import OmpiResult, read_result
from tests.harness.paths import REPO

ROOT = REPO

SAME = "same"
REFUSED = "refused by both"


@dataclass(frozen=True)
class Differs:
    """mslaunch deliberately reads this file otherwise than OpenMPI 4.1.4."""

    reason: str


Expect = Union[str, Differs]

#: Ways to write ``=`` between a key and its value.
SPACINGS = ["=", " = ", "= ", " =", "\t=\t"]


def _generated() -> List[Tuple[str, str, Expect]]:
    """One file per spacing: every slots, max_slots and username alias, and port, each on its host."""
    cases = []
    max_keys = sorted(MAX_SLOTS_KEYS)
    for i, eq in enumerate(SPACINGS):
        lines = [f"s{j}-{i} {key}{eq}{j + 2}" for j, key in enumerate(sorted(SLOTS_KEYS - {"slot"}))]
        lines += [f"m{j}-{i} slots{eq}2 {key}{eq}{j + 3}" for j, key in enumerate(max_keys)]
        lines += [f"a{j}-{i} {key}{eq}{j + 2}" for j, key in enumerate(max_keys)]  # max alone sets the slots
        lines += [f"u{j}-{i} {key}{eq}user{j} slots{eq}2" for j, key in enumerate(sorted(USER_KEYS))]
        lines += [f"p-{i} port{eq}2222", f"bob@q-{i} port{eq}2200 slots{eq}3 max_slots{eq}5"]
        cases.append((f"keys-spacing-{i}", "\n".join(lines) + "\n", SAME))
    return cases


CASES: List[Tuple[str, str, Expect]] = _generated() + [
    # whitespace and comments
    ("plain", "nodea slots=2\nnodeb slots=2\n", SAME),
    ("no-final-newline", "nodea slots=2\nnodeb", SAME),
    ("blank-and-ws-lines", "\n   \n\t\nnodea slots=2\n \t \nnodeb\n\n", SAME),
    ("leading-trailing-ws", "   nodea slots=2   \n\tnodeb\tslots=3\t\n\f\vnodec \v slots=4\f\n", SAME),
    ("hash-comments", "# cluster\n  # indented\nnodea slots=2 # trailing\nnodeb#glued\nnodec slots=3#glued\n", SAME),
    ("slash-comments", "// cluster\nnodea slots=2 // trailing\nnodeb//glued\n", SAME),
    (
        "block-comments",
        "/* one */\nnodea slots=2 /* two */\n/* three\n   four\n */ nodeb\n/* five */ nodec slots=3\n",
        SAME,
    ),
    ("block-comment-open-at-end", "nodea slots=2\n/* never closed\nnodeb\n", SAME),
    # hosts
    ("ipv4", "192.0.2.1 slots=2\n192.0.2.2\n", SAME),
    ("user-at-ipv4", "bob@192.0.2.1 slots=2\nalice@nodea port=2022\n", SAME),
    ("user-at-then-key", "bob@nodea username=eve\n", SAME),
    ("digits-name", "123 slots=2\nnode-1_x slots=3\n", SAME),
    ("ipv6", "fe80::1 slots=2\n", SAME),
    ("localhost", "localhost slots=2\n", SAME),
    # repeated hosts: one more slot per line
    ("repeat-bare", "nodea\nnodea\nnodeb\nnodea\n", SAME),
    ("repeat-after-slots", "nodea slots=2\nnodea\n", SAME),
    ("repeat-with-max", "nodea\nnodea max_slots=4\n", SAME),
    ("repeat-adds-user", "nodea\nnodea username=bob port=2022\n", SAME),
    ("max-repeated", "nodea max_slots=3 slots_max=5\n", SAME),
    ("max-then-more-slots", "nodea max_slots=4 slots=3\n", SAME),
    ("leading-zeros", "nodea slots=007 max_slots=0010\n", SAME),
    # refused by both
    ("slots-without-equals", "nodea slots 2\n", REFUSED),
    ("unknown-key", "nodea cpus=2\n", REFUSED),
    ("upper-case-key", "nodea SLOTS=2\n", REFUSED),
    ("negative", "nodea slots=-1\n", REFUSED),
    ("not-a-number", "nodea slots=two\n", REFUSED),
    ("quoted-slots", 'nodea slots="2"\n', REFUSED),
    ("slots-twice", "nodea slots=2 cpu=2\n", REFUSED),
    ("repeat-sets-slots", "nodea\nnodea slots=2\n", REFUSED),
    ("repeat-sets-slots-twice", "nodea slots=2\nnodea slots=3\n", REFUSED),
    ("max-below-slots", "nodea slots=4 max_slots=2\n", REFUSED),
    ("topology-key", "nodea boards=1\n", REFUSED),
    ("relative-node", "+n0\n", REFUSED),
    ("port-without-value", "nodea port=\nnodeb\n", REFUSED),
    (
        "hostlist-range",
        "node[1-2] slots=2\n",
        Differs("mslaunch expands Slurm hostlists as -H does; OpenMPI refuses '['"),
    ),
    (
        "colon-slots",
        "nodea:2\n",
        Differs(
            "mslaunch reads host:N as N slots (mpirun -H syntax); OpenMPI takes 'nodea:2' as a name it cannot launch on"
        ),
    ),
    ("slot-alias", "nodea slot=2\n", Differs("mslaunch reads slot= as slots=; OpenMPI refuses it (a rankfile word)")),
    ("crlf", "nodea slots=2\r\nnodeb\r\n", Differs("mslaunch reads Windows line ends; OpenMPI refuses '\\r'")),
    (
        "comment-at-eof",
        "nodea slots=2\n# last line without newline",
        Differs("OpenMPI's lexer needs a newline after a # comment"),
    ),
    # deliberately stricter
    (
        "stray-words",
        "nodea foo 4 slots=2\n",
        Differs("OpenMPI ignores words that are not key=value; they are typos (e.g. 'nodea nodeb')"),
    ),
    ("two-hosts-one-line", "nodea nodeb\n", Differs("OpenMPI silently drops the second host")),
    ("slots-zero", "nodea slots=0\n", Differs("a host with no slots can run nothing: refused")),
    ("port-zero", "nodea port=0\n", Differs("port 0 is no SSH port: refused")),
    (
        "max-then-fewer",
        "nodea max_slots=2 slots=4\n",
        Differs(
            "OpenMPI raises max_slots to slots when slots comes second; mslaunch refuses max_slots below slots in any "
            "order"
        ),
    ),
    (
        "caret-line",
        "nodea slots=2\n^bob@nodea\n",
        Differs("OpenMPI 4.1.4 adds a slot instead of excluding the host; use --exclude"),
    ),
    ("rankfile-line", "rank 0=nodea slot=0\n", Differs("rankfile syntax: mslaunch assigns ranks itself")),
    (
        "username-empty",
        "nodea username=\nnodeb\n",
        Differs("OpenMPI ignores the empty value and drops the next line's host"),
    ),
    ("username-quoted", 'nodea username="bob"\n', Differs("OpenMPI ignores quoted values silently")),
    (
        "repeat-other-user",
        "nodea\nbob@nodea\n",
        Differs("OpenMPI ignores user@ on a repeated host; mslaunch refuses the conflict"),
    ),
    ("empty-file", "# nothing here\n", Differs("OpenMPI falls back to this machine; mslaunch asks for hosts")),
    (
        "comma-in-name",
        "nodea,nodeb slots=2\n",
        Differs("OpenMPI reads one host named 'nodea,nodeb' it cannot launch on; not a host name"),
    ),
    # different meaning (read by both)
    (
        "username-with-dot",
        "nodea username=first.last\n",
        Differs("OpenMPI's lexer drops a user name with a dot; mslaunch uses it"),
    ),
    (
        "fqdn",
        "nodea.example.com slots=2\n",
        Differs("OpenMPI keeps only 'nodea'; mslaunch keeps the name whole for ssh"),
    ),
    (
        "fqdn-twice",
        "nodea.x slots=2\nnodea.y\n",
        Differs("OpenMPI merges both into 'nodea' (3 slots); mslaunch has two hosts"),
    ),
    ("local-aliases", "localhost slots=2\n127.0.0.1\n", Differs("OpenMPI merges this machine's names into one host")),
]


# the example hostfiles mean the same to OpenMPI
CASES += [
    (f"example-{name[:-4]}", open(os.path.join(ROOT, "hostfiles", name)).read(), SAME)
    for name in sorted(os.listdir(os.path.join(ROOT, "hostfiles")))
    if name.endswith(".txt")
]


def mslaunch_reads(text: str) -> Optional[OmpiResult]:
    """mslaunch's reading of ``text`` in the probe's terms (None when refused)."""
    try:
        inv = parse_hostfile(text, "corpus")
    except InventoryError:
        return None
    here = socket.gethostname()
    name = lambda h: here if h.is_local else h.name  # noqa: E731 - OpenMPI names this machine by its hostname
    hosts = {name(h): (h.slots, h.max_slots) for h in inv.hosts}
    ssh = {name(h): (h.ssh.user, h.ssh.port) for h in inv.hosts if not h.is_local}
    return OmpiResult(accepted=True, hosts=hosts, ssh=ssh, agent_ran=bool(ssh), stderr="")


def same(ours: Optional[OmpiResult], theirs: OmpiResult) -> bool:
    if ours is None or not theirs.accepted:
        return ours is None and not theirs.accepted
    return ours.hosts == theirs.hosts and ours.ssh == theirs.ssh


@pytest.fixture(scope="module")
def openmpi(tmp_path_factory) -> Dict[str, OmpiResult]:
    """Every corpus file as OpenMPI read it."""
    require_tool("mpirun", package="openmpi-bin")
    unshare = require_tool("unshare", package="util-linux")
    if os.geteuid() != 0:
        skip_or_fail("needs root (a private network namespace for mpirun)")
    folder = tmp_path_factory.mktemp("ompi_hostfiles")
    for name, text, _ in CASES:
        (folder / f"{name}.hosts").write_text(text)
    proc = subprocess.Popen(
        [
            unshare,
            "--net",
            "--pid",
            "--fork",
            "--kill-child",
            sys.executable,
            "-m",
            "tests.harness.ompi_hostfile_probe",
            str(folder),
        ],
        cwd=ROOT,
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        out, _ = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0, out.decode(errors="replace")
    with pytest.raises(ProcessLookupError):  # the probe's process group is gone: mpiruns, agents and all
        os.killpg(proc.pid, 0)
    return {name: read_result(str(folder / f"{name}.hosts")) for name, _, _ in CASES}


def test_corpus_names_are_unique() -> None:
    assert len({name for name, _, _ in CASES}) == len(CASES)


@pytest.mark.mpi
@pytest.mark.parametrize("name, text, expect", CASES, ids=[c[0] for c in CASES])
def test_hostfile_read_as_openmpi_reads_it(openmpi, name: str, text: str, expect: Expect) -> None:
    theirs = openmpi[name]
    ours = mslaunch_reads(text)
    shown = f"OpenMPI: {theirs.hosts if theirs.accepted else 'refused'} {theirs.ssh}; mslaunch: {ours}\n{theirs.stderr[-2000:]}"  # noqa: E501 - kept whole: a literal line as the program sees it
    if expect == SAME:
        assert ours is not None and theirs.accepted, shown
        assert same(ours, theirs), shown
        if ours.ssh:  # OpenMPI really tried to reach the remote hosts, so its users and ports are known
            assert theirs.agent_ran, shown
    elif expect == REFUSED:
        assert ours is None and not theirs.accepted, shown
    else:
        assert isinstance(expect, Differs) and expect.reason
        assert not same(ours, theirs), f"listed as a deliberate difference ({expect.reason}) but both agree: {shown}"
