"""HCCL rank tables: build from an inventory, merge per-host tables, validate, render.

A rank table is kept as the plain JSON value HCCL reads (``dict`` / ``list`` / ``str``), so what is
validated is exactly what is written.  Formats (see ``DESIGN.md`` §4):

Version ``"1.0"`` (Ascend 910 / 910B)::

    {"version": "1.0", "server_count": "2",
     "server_list": [{"server_id": "10.0.0.1",
                      "device": [{"device_id": "0", "device_ip": "192.1.27.6", "rank_id": "0"}, ...],
                      "host_nic_ip": "reserve"}, ...],
     "status": "completed"}

Version ``"1.2"`` (Atlas A3 SuperPoD)::

    {"version": "1.2", "server_count": "2",
     "server_list": [{"server_id": "node0", "host_ip": "172.16.0.100",
                      "device": [{"device_id": "0", "super_device_id": "0",
                                  "device_ip": "192.168.1.6", "rank_id": "0"}, ...]}, ...],
     "super_pod_list": [{"super_pod_id": "0", "server_list": [{"server_id": "node0"}, ...]}],
     "status": "completed"}

Ordering rules enforced by :func:`build_rank_table` and :func:`merge_rank_tables` and checked
by :func:`validate_rank_table`:

* every value is a JSON string;
* servers are in lexicographic (string) order of ``server_id``; for 1.2, servers are grouped by
  SuperPoD (pods in natural order of ``super_pod_id``: ``"2"`` before ``"10"``) and
  lexicographic within a pod;
* ``rank_id`` runs 0..N-1 through the servers in that order, devices of a server in the order
  the inventory lists them.

The package, by step:

* :mod:`.devices`: device IPs per host (:func:`resolve_device_ips`: hccn.conf copies, inventory);
* :mod:`.build`: a table from an inventory (:func:`build_rank_table`, :func:`rank_table_host_order`);
* :mod:`.merge`: per-host tables into one (:func:`merge_rank_tables`);
* :mod:`.validate`: every problem of a table (:func:`validate_rank_table`, :func:`check_rank_table`
  in :mod:`.build` raises on them);
* :mod:`.parse`: strict, bounded JSON in (:func:`parse_rank_table_json`, :func:`read_rank_table`);
* :mod:`.render`: stable JSON out (:func:`rank_table_json`, :func:`default_table_name`);
* :mod:`.common`: versions, chips, :class:`Violation`, message helpers.

Everything here is pure except :func:`read_rank_table` (reads one file) and the default
``read`` / ``exists`` callables of :func:`resolve_device_ips`, which can be replaced.
"""

from __future__ import annotations

from launcher.planning.ranktable.build import build_rank_table, check_rank_table, rank_table_host_order
from launcher.planning.ranktable.common import (
    CHIPS,
    MAX_QUOTED,
    STATUSES,
    VERSIONS,
    DeviceIps,
    RankTableJSONError,
    Violation,
)
from launcher.planning.ranktable.devices import resolve_device_ips
from launcher.planning.ranktable.merge import merge_rank_tables
from launcher.planning.ranktable.parse import (
    MAX_JSON_DEPTH,
    MAX_JSON_VALUES,
    MAX_RANK_TABLE_BYTES,
    MAX_TABLE_DEVICES,
    parse_rank_table_json,
    read_rank_table,
)
from launcher.planning.ranktable.render import default_table_name, rank_table_json, table_size
from launcher.planning.ranktable.validate import validate_rank_table

__all__ = [
    "CHIPS",
    "MAX_JSON_DEPTH",
    "MAX_JSON_VALUES",
    "MAX_QUOTED",
    "MAX_RANK_TABLE_BYTES",
    "MAX_TABLE_DEVICES",
    "STATUSES",
    "VERSIONS",
    "DeviceIps",
    "RankTableJSONError",
    "Violation",
    "build_rank_table",
    "check_rank_table",
    "default_table_name",
    "merge_rank_tables",
    "parse_rank_table_json",
    "rank_table_host_order",
    "rank_table_json",
    "read_rank_table",
    "resolve_device_ips",
    "table_size",
    "validate_rank_table",
]
