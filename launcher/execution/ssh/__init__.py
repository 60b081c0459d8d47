"""The ssh backend (moved here from ``launcher/execution/ssh.py``; split into modules next)."""
from launcher.execution.ssh.backend import *  # noqa: F401,F403
from launcher.execution.ssh.backend import _describe_connect_error, _parallel  # noqa: F401
