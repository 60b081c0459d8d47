"""``mslaunch --version``: the version of the installed package.

Standard library only, and no command's module: ``launcher/__main__.py`` answers
``--version`` with this before it imports typer or any command.
"""

from __future__ import annotations

#: the distribution's name (setup.cfg ``[metadata] name``)
DISTRIBUTION = "mslaunch"


def version() -> str:
    """The version in the installed ``mslaunch`` distribution's metadata, or the source tree's
    ``launcher.__version__`` when no distribution is installed (the package run from a checkout
    through ``PYTHONPATH``)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as distribution_version

    try:
        return distribution_version(DISTRIBUTION)
    except PackageNotFoundError:
        from launcher import __version__

        return __version__


def version_line() -> str:
    """What ``mslaunch --version`` prints: ``mslaunch X.Y.Z``."""
    return f"mslaunch {version()}"
