"""``python -m launcher`` and the ``mslaunch`` command (see :func:`main`)."""

import sys


def main() -> None:
    """Run ``mslaunch`` with ``sys.argv``.

    ``mslaunch --version`` prints the version and imports nothing else
    (:mod:`launcher.cli.version`).  ``mslaunch ranktable ...`` goes straight to
    :func:`launcher.cli.ranktable.main`: rank tables need none of the other commands, whose
    imports are most of the start-up time.  Everything else goes to :func:`launcher.cli.app.main`.
    """
    import os

    if "MSLAUNCH_HIDDEN_ARGS" in os.environ:  # a detached run: its --env values (launcher.cli.hiddenenv)
        from launcher.cli.hiddenenv import restore_argv

        try:
            sys.argv = restore_argv(sys.argv, os.environ)
        except ValueError as exc:
            sys.stderr.write(f"mslaunch: error: {exc}\n")
            sys.exit(2)
    args = sys.argv[1:]
    if args[:1] == ["--version"]:
        from launcher.cli.version import version_line

        sys.stdout.write(version_line() + "\n")
        return
    if args[:1] == ["ranktable"]:
        from launcher.cli.ranktable import main as ranktable_main

        ranktable_main(args[1:])
        return
    if [a for a in args if not a.startswith("-")][:1] == ["run"]:
        # First thing: a stop signal during start-up must become a "stopped" job, not a lost one.
        from launcher.execution import stopsignals

        stopsignals.install()

    from launcher.cli.app import main as app_main

    app_main()


if __name__ == "__main__":
    main()
