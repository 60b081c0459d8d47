"""``mslaunch data``: datasets for the shipped workloads."""

from __future__ import annotations

from pathlib import Path

import typer

from launcher.cli.docs import epilog
from launcher.errors import MsLaunchError

app = typer.Typer(no_args_is_help=True, help="Datasets for the shipped workloads.")


@app.callback()
def _group() -> None:
    """Datasets for the shipped workloads."""
    # A callback keeps `data` a command group (``mslaunch data synth-cifar10 DIR``) even while it
    # has a single command, also when this app is run on its own.


@app.command("synth-cifar10", epilog=epilog("workload"))
def synth_cifar10(
    directory: Path = typer.Argument(
        ..., metavar="DIR", help="Parent folder; the data goes to DIR/cifar-10-batches-bin (created if missing)."
    ),
    train: int = typer.Option(2000, "--train", help="Training records, spread over data_batch_1..5.bin."),
    test: int = typer.Option(500, "--test", help="Test records, in test_batch.bin."),
    seed: int = typer.Option(0, "--seed", help="Random seed; the same seed writes the same bytes."),
) -> None:
    """Write a synthetic CIFAR-10 in the real binary layout (learnable classes, deterministic).

    Point the trainer at DIR: python -m launcher.workloads.resnet50_cifar10 --data-path DIR.
    """
    # numpy is only needed here, so the rest of the CLI does not import it.
    from launcher.workloads.cifar10_synth import SynthDataError, write_synthetic_cifar10

    if directory.exists() and not directory.is_dir():
        raise MsLaunchError("exists and is not a directory", path=str(directory))
    try:
        path = write_synthetic_cifar10(str(directory), train=train, test=test, seed=seed)
    except SynthDataError as exc:
        raise MsLaunchError(exc.message, path=exc.path) from None
    typer.echo(
        f"wrote {path}: {train} train records (data_batch_1..5.bin), {test} test records "
        f"(test_batch.bin), batches.meta.txt; seed {seed}"
    )
