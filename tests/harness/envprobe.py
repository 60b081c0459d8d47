"""Hostile and secret variables through a real job, for one test per backend.

:class:`EnvProbe` holds a fixed table of hostile values (blanks, quotes, ``$(...)``, backticks,
newlines, commas, ``:``, ``=``, non-ASCII, a leading ``-``...) set with ``--env``, and three
secrets (one matching the default patterns set with ``--env``, one ``--secret-env`` from the
environment, one from a ``--secret-env-file``); every value of both kinds carries a marker of its
kind, unique to the test, so a scan finds it anywhere.  The ranks are ``tests/scripts/envprobe.py``:
each reports the SHA-256 of every variable's bytes and waits, so the test can read every
process's ``/proc/PID/cmdline`` while the whole job is up (:meth:`EnvProbe.leaks_on_command_lines`),
then lets it end (:meth:`EnvProbe.release`) and compares the digests
(:meth:`EnvProbe.check_ranks`) and looks for the secrets in every file (:meth:`EnvProbe.files_holding_secrets`).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from typing import Dict, Iterable, List, Optional, Sequence

import psutil

from tests.harness.paths import TESTS

PROBE = os.path.join(TESTS, "scripts", "envprobe.py")
#: The program's own arguments: a bare ``:`` (mpirun's context separator) among them.
PROGRAM_ARGS = (":", "-x", "two words", ":")

#: Hostile shapes; each value is ``shape + marker + shape`` (a leading ``-`` stays leading).
SHAPES = {
    "SPACES": "  two  blanks around  ",
    "QUOTES": "'single' \"double\" \\back\\slash\\",
    "SUBST": "$(touch {dir}/pwned) ${{HOME}} `touch {dir}/pwned` $$",
    "NEWLINES": "first\nsecond\n\n",
    "COMMAS": "a,b,,c,",
    "COLON": ":",
    "EQUALS": "k=v==w=",
    "UNICODE": "héllo wörld 世界 ✓",
    "DASH": "-x --env -np 9",
    "SHELL": "a; exit 3 && b | c > /dev/null # d * ? [a-z] ~",
}


class EnvProbe:
    """The variables of one test's job and the checks of what the job did with them."""

    def __init__(self, tmp_path) -> None:
        self.dir = tmp_path / "probe"
        self.dir.mkdir()
        os.chmod(self.dir, 0o777)  # the ranks may run as another user's login (never here: same user)
        self.marker = "pk" + uuid.uuid4().hex[:12]
        self.secret_marker = "sk" + uuid.uuid4().hex[:12]
        self.values: Dict[str, str] = {
            f"MSL_{k}": v.format(dir=self.dir) + self.marker + v.format(dir=self.dir) for k, v in SHAPES.items()
        }
        self.values["MSL_COLON_ONLY"] = ":"
        self.values["MSL_EMPTY"] = ""
        sm = self.secret_marker
        self.secrets: Dict[str, str] = {
            "HF_TOKEN": f"hf-{sm} $(touch {self.dir}/pwned) 'q' \"d\"\n, := -x é",  # by the default patterns
            "S_CRED": f"-cred-{sm}\n`touch {self.dir}/pwned`:,=世界 ",  # --secret-env, from the environment
            "FILE_PASSWORD": f"pw-{sm}-plain",  # --secret-env-file (one K=V line)
        }
        self.secret_file = tmp_path / "secrets.env"
        self.secret_file.write_text(f"FILE_PASSWORD={self.secrets['FILE_PASSWORD']}\n")

    @property
    def names(self) -> List[str]:
        return list(self.values) + list(self.secrets)

    def run_args(self) -> List[str]:
        """The run options setting every variable (none of the ``--secret-env`` values)."""
        args: List[str] = []
        for key, value in self.values.items():
            args += ["--env", f"{key}={value}"]
        args += ["--env", f"HF_TOKEN={self.secrets['HF_TOKEN']}", "--secret-env", "S_CRED"]
        args += ["--secret-env-file", str(self.secret_file)]
        args += ["--env", "PROBE_NAMES=" + ",".join(self.names), "--env", f"PROBE_DIR={self.dir}"]
        return args

    def program(self) -> List[str]:
        return [PROBE, *PROGRAM_ARGS]

    def environ(self, base: Dict[str, str]) -> Dict[str, str]:
        """``base`` with the ``--secret-env`` value mslaunch takes from its environment."""
        return dict(base, S_CRED=self.secrets["S_CRED"])

    # ----------------------------------------------------------------- while the job runs

    def wait_ready(self, n: int, alive=lambda: True, timeout: float = 120) -> List[int]:
        """Wait until ``n`` processes reported (and ``alive()`` stays true); their pids."""
        deadline = time.monotonic() + timeout
        while True:
            ready = [p for p in os.listdir(self.dir) if p.endswith(".ready")]
            if len(ready) >= n:
                return [int((self.dir / p).read_text()) for p in ready]
            assert alive(), "the job ended before every process reported"
            assert time.monotonic() < deadline, f"only {ready} reported"
            time.sleep(0.05)

    def leaks_on_command_lines(self, roots: Iterable[int], others: Iterable[int] = ()) -> List[str]:
        """``pid: cmdline`` of every process (``roots`` and their descendants, and ``others``)
        whose command line holds a marked value."""
        pids = set(others)
        for root in roots:
            try:
                proc = psutil.Process(root)
                pids.add(root)
                pids.update(c.pid for c in proc.children(recursive=True))
            except psutil.NoSuchProcess:
                pass
        assert pids, "no process to read"
        marks = (self.marker.encode(), self.secret_marker.encode())
        leaks = []
        for pid in sorted(pids):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    line = fh.read()
            except OSError:
                continue  # ended since
            if any(m in line for m in marks):
                leaks.append(f"{pid}: {line!r}")
        return leaks

    def release(self) -> None:
        (self.dir / "go").write_text("")

    # ----------------------------------------------------------------- after the job

    def check_ranks(self, texts: Sequence[str], expected: int) -> None:
        """Every one of ``expected`` processes' ``envprobe`` lines (in the logs ``texts``) has
        every value byte for byte and the program's arguments as given; nothing was run."""
        want = {k: hashlib.sha256(v.encode()).hexdigest() for k, v in {**self.values, **self.secrets}.items()}
        seen = {}
        for text in texts:
            for line in text.splitlines():
                if line.startswith("envprobe "):
                    data = json.loads(line[len("envprobe ") :])
                    seen[data["name"]] = data
        assert len(seen) == expected, sorted(seen)
        for name, data in seen.items():
            wrong = [k for k in want if data["sha256"].get(k) != want[k]]
            assert not wrong, f"{name}: not byte for byte: {wrong}"
            assert data["argv"] == list(PROGRAM_ARGS), (name, data["argv"])
        assert not (self.dir / "pwned").exists(), "a value was run by a shell"

    def secret_bytes(self) -> List[bytes]:
        return [self.secret_marker.encode()] + [v.encode() for v in self.secrets.values()]

    def files_holding_secrets(self, *roots: str, skip: Optional[Sequence[str]] = None) -> List[str]:
        """Files under ``roots`` holding a secret's value (or its marker)."""
        found = []
        for root in roots:
            for folder, _, files in os.walk(root):
                for name in files:
                    path = os.path.join(folder, name)
                    if skip and path in skip:
                        continue
                    try:
                        with open(path, "rb") as fh:
                            data = fh.read()
                    except OSError:
                        continue
                    if any(s in data for s in self.secret_bytes()):
                        found.append(path)
        return found

    def shows_no_secret(self, text: str) -> bool:
        return not any(s.decode() in text for s in self.secret_bytes())
