import sys

if [a for a in sys.argv[1:] if not a.startswith("-")][:1] == ["run"]:
    # First thing: a stop signal during start-up must become a "stopped" job, not a lost one.
    from launcher.execution import stopsignals

    stopsignals.install()

from launcher.cli.app import main  # noqa: E402

if __name__ == "__main__":
    main()
