"""The allocation ``mslaunch sbatch`` asks for (derived from --np/--per-host) and its stand-in."""

from __future__ import annotations

import pytest

from launcher.errors import InventoryError, PlanError
from launcher.planning.backends.sbatch import Shape, derive_shape, parse_nodes, stand_in_environ, stand_in_inventory
from launcher.planning.backends.slurm import parse_allocation


@pytest.mark.parametrize(
    "given, np, per_host, directives, derived",
    [
        # nothing of the shape given: derived from --np and --per-host
        ((None, None, None), 16, 8, ["--nodes=2", "--ntasks-per-node=8"], ("--nodes", "--ntasks-per-node")),
        ((None, None, None), 4, 2, ["--nodes=2", "--ntasks-per-node=2"], ("--nodes", "--ntasks-per-node")),
        ((None, None, None), 10, 8, ["--nodes=2", "--ntasks-per-node=8"], ("--nodes", "--ntasks-per-node")),
        (
            (None, None, None),
            4,
            None,
            ["--nodes=1", "--ntasks-per-node=4"],
            ("--nodes", "--ntasks-per-node"),
        ),  # --np alone: one node
        ((None, None, None), None, 8, ["--nodes=1", "--ntasks-per-node=8"], ("--nodes", "--ntasks-per-node")),
        ((None, None, None), None, None, [], ()),  # Slurm's default
        # -N only: tasks per node derived
        (("2", None, None), 4, None, ["--nodes=2", "--ntasks-per-node=2"], ("--ntasks-per-node",)),
        (("2", None, None), 5, None, ["--nodes=2", "--ntasks-per-node=3"], ("--ntasks-per-node",)),
        (("3", None, None), 4, 2, ["--nodes=3", "--ntasks-per-node=2"], ("--ntasks-per-node",)),
        (("2-4", None, None), 8, None, ["--nodes=2-4", "--ntasks-per-node=4"], ("--ntasks-per-node",)),
        (("2", None, None), None, None, ["--nodes=2"], ()),
        # --ntasks-per-node only: nodes derived
        ((None, None, 4), 8, None, ["--nodes=2", "--ntasks-per-node=4"], ("--nodes",)),
        ((None, None, 4), 8, 2, ["--nodes=4", "--ntasks-per-node=4"], ("--nodes",)),
        # given whole: kept
        (("3", None, 2), 6, None, ["--nodes=3", "--ntasks-per-node=2"], ()),
        ((None, 6, None), 6, None, ["--ntasks=6"], ()),
        (("2", 3, None), 3, None, ["--nodes=2", "--ntasks=3"], ()),
    ],
)
def test_derived_shape(given, np, per_host, directives, derived) -> None:
    shape = derive_shape(*given, np, per_host)
    assert shape.directives() == directives
    assert shape.derived == derived


@pytest.mark.parametrize(
    "given, np, per_host, needle",
    [
        (
            ("2", None, 2),
            9,
            None,
            "9 ranks do not fit the allocation asked for (--nodes 2 --ntasks-per-node 2: 4 slots)",
        ),
        (("2", 3, None), 4, None, "4 ranks do not fit"),
        ((None, 4, None), 5, None, "5 ranks do not fit"),
        (
            ("2", None, 4),
            8,
            1,
            "8 ranks do not fit the allocation asked for (--nodes 2 --ntasks-per-node 4: 2 slots at --per-host 1)",
        ),
        (("2-4", None, 2), 6, None, "6 ranks do not fit"),  # the least of a range counts
        (("2", None, 2), 4, 4, "--per-host 4 is more than the --ntasks-per-node 2"),
        (("x", None, None), 1, None, "expected a node count N or MIN-MAX"),
        (("0", None, None), 1, None, "node counts must be 1.."),
        (("4-2", None, None), 1, None, "MIN <= MAX"),
        ((None, 0, None), 1, None, "must be 1.."),
        ((None, None, 0), 1, None, "must be 1.."),
        ((None, None, None), 2000, None, "more than 1024 tasks"),
    ],
)
def test_shapes_that_cannot_hold_the_job_are_refused(given, np, per_host, needle) -> None:
    with pytest.raises(PlanError) as exc:
        derive_shape(*given, np, per_host)
    assert needle in str(exc.value)


def test_bad_np_and_per_host_are_left_to_the_runs_own_check() -> None:
    assert derive_shape(None, None, None, 0, None) == Shape()
    assert derive_shape("2", None, None, -3, 0) == Shape(nodes="2")


@pytest.mark.parametrize(
    "shape, per_host, nodes, slots",
    [
        (Shape(nodes="2", ntasks_per_node=8), None, ("node1", "node2"), (8, 8)),
        (Shape(nodes="2", ntasks_per_node=8), 3, ("node1", "node2"), (3, 3)),
        (Shape(nodes="2", ntasks=3), None, ("node1", "node2"), (2, 1)),  # as Slurm spreads -N 2 -n 3
        (Shape(ntasks=6), None, ("node1",), (6,)),
        (Shape(ntasks=6, ntasks_per_node=2), None, ("node1", "node2", "node3"), (2, 2, 2)),
        (Shape(nodes="3"), None, ("node1", "node2", "node3"), (1, 1, 1)),
        (Shape(), None, ("node1",), (1,)),
        (Shape(nodes="2-5", ntasks_per_node=1), None, ("node1", "node2"), (1, 1)),
    ],
)
def test_the_stand_in_is_read_as_the_run_reads_its_allocation(shape, per_host, nodes, slots) -> None:
    alloc = parse_allocation(stand_in_environ(shape), per_host)
    assert (alloc.nodes, alloc.slots) == (nodes, slots)


def test_stand_in_inventory_checks_the_syntax_of_node_names_only() -> None:
    alloc = parse_allocation(stand_in_environ(Shape(nodes="2", ntasks_per_node=2)))
    inv = stand_in_inventory(alloc, "gpu[1-2]:2", "gpu1", None)  # real names: not applied
    assert [(h.name, h.slots) for h in inv.hosts] == [("node1", 2), ("node2", 2)]
    assert [h.device_ips for h in inv.hosts] == [
        ((0, "198.18.0.0"), (1, "198.18.0.1")),
        ((0, "198.18.0.2"), (1, "198.18.0.3")),
    ]
    assert stand_in_inventory(alloc, None, "", None).hosts == inv.hosts  # an empty filter filters nothing
    for args, needle in (
        (("gpu[1-", None, None), "missing ']'"),
        ((None, "a:x", None), "must be integers"),
        ((None, "a", "b"), "mutually exclusive"),
        ((None, None, "@"), "empty host"),
    ):
        with pytest.raises(InventoryError) as exc:
            stand_in_inventory(alloc, *args)
        assert needle in str(exc.value)


def test_parse_nodes() -> None:
    assert parse_nodes("3") == (3, None)
    assert parse_nodes("2-4") == (2, 4)


# ---------------------------------------------------------------- #SBATCH values (issue 45)


def _sbatch_arguments(line: str, old: bool = False):
    """The arguments sbatch reads from one ``#SBATCH`` line: Slurm's ``_get_argument``
    (``src/sbatch/opt.c``) in Python; ``old``: the older parser (only ``"`` quotes, and an
    unescaped ``#`` ends the argument even inside them)."""
    assert line.startswith("#SBATCH")
    rest, args = line[len("#SBATCH") :], []
    i = 0
    while True:
        while i < len(rest) and rest[i].isspace():
            i += 1
        if i >= len(rest):
            return args
        arg, escape, quote = "", False, ""
        while i < len(rest) and (quote or not rest[i].isspace()) and rest[i] != "\n":
            c = rest[i]
            i += 1
            if escape:
                escape = False
            elif c == "\\":
                escape = True
                continue
            elif old and c == "#":
                i = len(rest)
                break
            elif quote:
                if c == quote:
                    quote = ""
                    continue
            elif c == '"' or (c == "'" and not old):
                quote = c
                continue
            elif c == "#":
                i = len(rest)
                break
            arg += c
        assert not quote, f"unmatched quote in {line!r}"
        if arg:
            args.append(arg)
        else:
            return args


@pytest.mark.parametrize(
    "value",
    [
        "plain-name_1.2",
        "two words",
        "a#b",
        'say "hi"',
        "back\\slash",
        "it's",
        "tab\there",
        "/logs/my job/slurm.out",
        "",
    ],
)
@pytest.mark.parametrize("old", [False, True], ids=["slurm", "old-slurm"])
def test_a_directive_value_is_read_back_whole_by_sbatch(value, old) -> None:
    from launcher.planning.backends.sbatch import directive

    line = "#SBATCH " + directive("--job-name", value)
    assert _sbatch_arguments(line, old=old) == [f"--job-name={value}"], line
    if value == "plain-name_1.2":
        assert line == f"#SBATCH --job-name={value}"  # plain values are written as they are


@pytest.mark.parametrize("bad", ["a\ntouch x", "a\rb", "a\0b", "\n"])
def test_a_directive_value_that_breaks_the_line_is_refused_naming_the_field(bad) -> None:
    from launcher.planning.backends.sbatch import directive

    with pytest.raises(PlanError) as err:
        directive("--output", bad, field="--log-dir")
    assert str(err.value).startswith("--log-dir: ") and "\n" not in str(err.value)
