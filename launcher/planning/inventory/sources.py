"""Inventories: which hosts a job may use, with how many slots, and what is known of each.

Three sources, each with a pure ``parse_*`` on text and a thin ``read_*`` on a path:

* an OpenMPI hostfile, read as OpenMPI 4.1 reads it (``host slots = N max_slots=M``, every key
  alias, ``username=`` / ``user@host`` and ``port=``, ``#``, ``//`` and ``/* */`` comments; see
  :mod:`launcher.planning.inventory.hostfile`), plus ``host:N`` and hostlists,
* a ``-H h1:8,h2:8`` list,
* a YAML cluster file (see :func:`parse_cluster_yaml` for its keys).

Host filters (``--include`` / ``--exclude``) use DeepSpeed's syntax ``host1:0,1@host2`` and are
applied before anything is generated.

Bad input never gets further than one :class:`~launcher.errors.InventoryError` naming
``path:line`` (or the flag): numbers are ASCII digits within :data:`MAX_SLOTS`,
:data:`MAX_DEVICE_ID` and :data:`MAX_HOSTS`; YAML is bounded in size, depth and alias expansion
(see :func:`~launcher.planning.inventory.yamltree.yaml_tree`); env values are checked by :func:`env_problem`.

This module is the one import for all of it; the pieces live by source:

* :mod:`launcher.planning.inventory.model`: the model (:class:`Host`, :class:`Inventory`, :data:`LOCAL_NAMES`,
  :func:`is_local`) and the shared checks and bounds;
* :mod:`launcher.planning.inventory.hostarg`: ``-H`` lists, and OpenMPI hostfiles
(:mod:`launcher.planning.inventory.hostfile`);
* :mod:`launcher.planning.inventory.clusteryaml` (with :mod:`launcher.planning.inventory.yamltree`): YAML cluster files;
* :mod:`launcher.planning.inventory.filters`: ``--include`` / ``--exclude``.
"""

from __future__ import annotations

import os
import re

from launcher.errors import InventoryError
from launcher.planning.inventory.clusteryaml import parse_cluster_yaml
from launcher.planning.inventory.filters import apply_filters, parse_filter
from launcher.planning.inventory.hostarg import MAX_HOSTFILE_BYTES, parse_host_list
from launcher.planning.inventory.hostfile import parse_hostfile
from launcher.planning.inventory.model import (
    LOCAL_NAMES,
    MAX_DEVICE_ID,
    MAX_ENV_ENTRY_BYTES,
    MAX_HOSTS,
    MAX_SLOTS,
    Host,
    Inventory,
    SshOptions,
    env_problem,
    is_local,
)
from launcher.planning.inventory.yamltree import MAX_YAML_CHARS, MAX_YAML_DEPTH, MAX_YAML_NODES
from launcher.planning.text.textfile import read_text

__all__ = [
    "LOCAL_NAMES",
    "MAX_DEVICE_ID",
    "MAX_ENV_ENTRY_BYTES",
    "MAX_HOSTS",
    "MAX_SLOTS",
    "MAX_YAML_CHARS",
    "MAX_YAML_DEPTH",
    "MAX_YAML_NODES",
    "Host",
    "Inventory",
    "SshOptions",
    "apply_filters",
    "env_problem",
    "is_local",
    "local_inventory",
    "parse_cluster_yaml",
    "parse_filter",
    "parse_host_list",
    "parse_hostfile",
    "read_hosts_arg",
    "read_inventory",
]


def read_inventory(path: str) -> Inventory:
    """Read a hostfile or, for ``.yaml``/``.yml`` files, a YAML cluster file."""
    missing = "no such file; pass an existing hostfile or cluster YAML"
    if path.endswith((".yaml", ".yml")):
        text = read_text(path, InventoryError, missing, "a cluster file", limit=MAX_YAML_CHARS)
        return parse_cluster_yaml(text, path=path, base_dir=os.path.dirname(os.path.abspath(path)))
    return parse_hostfile(read_text(path, InventoryError, missing, "a hostfile", limit=MAX_HOSTFILE_BYTES), path=path)


#: Endings that make a ``--hosts`` value a file name even when no such file exists.
_FILE_ENDINGS = (".yaml", ".yml", ".txt", ".json", ".conf", ".hosts", ".hostfile", ".list")


def read_hosts_arg(value: str, default_slots: int = 1, flag: str = "--hosts") -> Inventory:
    """``--hosts VALUE``: a hostfile or cluster YAML when ``VALUE`` is a file, else a host list
    or Slurm hostlist (``node[01-04]``, ``$SLURM_JOB_NODELIST``; see :func:`parse_host_list`),
    its hosts having ``default_slots`` unless written ``host:N``.

    A value with a ``/``, with a file-like ending (``hosts.txt``) or with characters no host
    name has is always a file name, so a mistyped path is reported as a missing file.

    Raises:
        InventoryError: as :func:`read_inventory` or :func:`parse_host_list` (``field=flag``).
    """
    if os.path.exists(value) or "/" in value or value.endswith(_FILE_ENDINGS) or not _HOSTS_ARG_RE.fullmatch(value):
        return read_inventory(value)
    return parse_host_list(value, default_slots=default_slots, field=flag)


_HOSTS_ARG_RE = re.compile(r"[A-Za-z0-9_.\-:\[\],%]+")


def local_inventory(slots: int) -> Inventory:
    """The default inventory: this machine with ``slots`` slots.

    Raises:
        InventoryError: ``slots`` outside ``1..MAX_SLOTS`` (field ``--np``).
    """
    if not 1 <= slots <= MAX_SLOTS:
        raise InventoryError(f"this machine alone takes 1..{MAX_SLOTS} ranks, got {slots}", field="--np")
    return Inventory((Host(name="localhost", slots=slots, source="default"),), source=None)
