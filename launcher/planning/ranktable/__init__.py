"""HCCL rank tables (moved into a package; split by step in the next commit)."""
from launcher.planning.ranktable.validate import *  # noqa: F401,F403
from launcher.planning.ranktable.validate import _render  # noqa: F401
