"""``--env`` values out of the detached run's process title.

``mslaunch run --detach`` re-runs its own command line in the background; that process lives as
long as the job, and its command line (``/proc/PID/cmdline``: ``ps``, ``top -c``, ``pgrep -f``)
is readable by every user of the host.  So the detached process is started with each ``--env
NAME=VALUE`` shown as ``--env NAME=<hidden>``, and the hidden arguments travel in its environment
(:data:`HIDDEN_ENV_VAR`, readable only by the user and root, as the ranks' own environments are);
:func:`restore_argv` puts them back (and removes the variable, so no rank inherits it) before
the command line is parsed.  ``--env-file`` values are never on a command line.

The run a ``sbatch.sh`` starts gets its values the same way (:func:`launcher.cli.sbatch.render_script`).
A run the user starts in the foreground was given its values on its command line by the user;
:func:`hide_own_title` rewrites its title (``setproctitle``) the same way as soon as the options
are parsed, for the rest of the job's life.
"""

from __future__ import annotations

import ctypes
import json
from typing import AbstractSet, Dict, List, MutableMapping, Sequence, Tuple

#: The variable the detached run's hidden arguments travel in: ``{"<index in argv[1:]>": "arg"}``.
HIDDEN_ENV_VAR = "MSLAUNCH_HIDDEN_ARGS"
#: What the title shows in place of a value.
HIDDEN = "<hidden>"


def hide_env_values(
    args: Sequence[str], assignments: Sequence[str], shown: str = HIDDEN
) -> Tuple[List[str], Dict[str, str]]:
    """``args`` with the value of each ``--env`` assignment replaced by ``shown``.

    Args:
        args: the command line after the program name (``run ... --env K=V ... prog ...``).
        assignments: the parsed ``--env`` values (``K=V``), in the order of the command line;
            each is found in order, as its own argument (``--env K=V``, ``-e K=V``) or at the end
            of one (``--env=K=V``, ``-eK=V``), so the program's own arguments after them are kept.

    Returns:
        The arguments to show, and ``{index: original argument}`` of those changed.
    """
    out = list(args)
    hidden: Dict[str, str] = {}
    i = 0
    for assignment in assignments:
        name, _, value = assignment.partition("=")
        if not value:
            continue  # nothing to hide
        while i < len(out):
            arg = out[i]
            if arg == assignment or (arg.startswith("-") and arg.endswith(assignment)):
                hidden[str(i)] = arg
                out[i] = arg[: len(arg) - len(assignment)] + f"{name}={shown}"
                i += 1
                break
            i += 1
    return out, hidden


def without_secrets(argv: Sequence[str], assignments: Sequence[str], secrets: AbstractSet[str]) -> List[str]:
    """``argv`` (``sys.argv``) as ``job.json`` and the registry record it: the value of each
    ``--env`` assignment of a secret variable shown as ``<secret>``."""
    from launcher.planning.job.secrets import SHOWN

    mine = [a for a in assignments if a.partition("=")[0] in secrets]
    return [*argv[:1], *hide_env_values(list(argv[1:]), mine, SHOWN)[0]]


def restore_argv(argv: List[str], environ: MutableMapping[str, str]) -> List[str]:
    """``argv`` (``sys.argv``) with the arguments :func:`hide_env_values` hid put back from
    :data:`HIDDEN_ENV_VAR`, which is removed from ``environ``; ``argv`` as it is without it.

    Raises:
        ValueError: the variable does not match ``argv`` (one line saying so).
    """
    text = environ.pop(HIDDEN_ENV_VAR, None)
    if text is None:
        return argv
    out = list(argv)
    try:
        hidden = json.loads(text)
        for key, arg in hidden.items():
            index = int(key) + 1
            if not (isinstance(arg, str) and 0 < index < len(out) and out[index].endswith(f"={HIDDEN}")):
                raise ValueError(key)
            out[index] = arg
    except (ValueError, TypeError, AttributeError):
        raise ValueError(f"{HIDDEN_ENV_VAR} does not match this command line; start the run again") from None
    return out


def hide_own_title(assignments: Sequence[str]) -> bool:
    """Rewrite this process's title (``/proc/self/cmdline``) with each ``--env`` value shown as
    :data:`HIDDEN`, when it shows any; its short name (``/proc/self/comm``: ``pgrep mslaunch``)
    is kept.  Best effort: without ``setproctitle`` or ``/proc`` the title is left as it is.

    Returns:
        True when the title was rewritten.
    """
    try:
        with open("/proc/self/cmdline", "rb") as fh:
            raw = fh.read()
        with open("/proc/self/comm", "rb") as fh:
            comm = fh.read().strip()[:15]
    except OSError:
        return False
    args = raw.rstrip(b"\0").decode("utf-8", "surrogateescape").split("\0")
    shown, hidden = hide_env_values(args[1:], assignments)
    if not hidden:
        return False
    try:
        import setproctitle
    except ImportError:
        return False
    try:
        setproctitle.setproctitle(" ".join([args[0], *shown]))
    except (UnicodeError, ValueError):
        return False  # a title it cannot encode: left as it is
    try:  # setproctitle renames the process (comm) after the title: named back
        ctypes.CDLL(None, use_errno=True).prctl(15, ctypes.c_char_p(comm), 0, 0, 0)  # PR_SET_NAME
    except (OSError, AttributeError):
        pass
    return True
