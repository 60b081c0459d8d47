"""The live view's footer names the slowest and fastest rank only when their step times differ."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from launcher.cli.top import render
from launcher.logs.progress import Progress, snapshot


def footer(times, world=2):
    prog = Progress()
    for rank, ms in times.items():
        prog.add(
            {
                "rank": rank,
                "time": 1.0,
                "kind": "step",
                "global_step": 10,
                "total_steps": 100,
                "loss": 1.0,
                "step_time_ms": ms,
                "samples_per_s": 32000.0 / ms,
            }
        )
    snap = snapshot("j", "running", 50.0, world, {}, prog, {r: 49.0 for r in range(world)})
    con = Console(width=200, record=True, file=io.StringIO())
    con.print(render(snap, 200))
    return [line for line in con.export_text().splitlines() if line.startswith("total ")][0]


@pytest.mark.parametrize(
    "times, world", [({0: 1005.0, 1: 1005.0}, 2), ({1: 1005.0}, 2), ({0: 1005.0}, 1), ({0: 1004.6, 1: 1005.4}, 2)]
)
def test_no_straggler_talk_without_a_spread(times, world):
    line = footer(times, world)
    assert "slowest" not in line and "fastest" not in line, line


def test_a_spread_names_both_ranks():
    assert " · slowest rank 1 (1500 ms/step) · fastest rank 0 (1005 ms/step)" in footer({0: 1005.0, 1: 1500.0})
