"""MindSpore's compile cache for the reference trainer: a restart takes its graphs from the cache
instead of compiling them again.  Stdlib only.

mslaunch offers every process of a job one folder for it, ``MSLAUNCH_COMPILE_CACHE``
(``<job dir>/compile_cache``, kept across the job's attempts), and leaves MindSpore's cache off:
MindSpore 2.10 finds a cached graph *by its position* in the process (the first graph compiled is
``compile_cache_0.mindir``) and only checks that the program's Python files did not change, so a
program that compiles other graphs first in a restart would get the wrong ones.  The reference
trainer compiles the same graphs in the same order in every attempt (see
:func:`launcher.workloads.checkpoints.align_compile_order`), so it turns the cache on itself
there, unless the user set MindSpore's variables (then they decide).  MindSpore reads them at each
compile, so this works in a process forked from a zygote that imported MindSpore already.

A job that goes on with fewer ranks than planned (``--min-hosts``) compiles other graphs (another
number of micro-batches, of another size): its attempts use a folder of their own for each size,
``<folder>/world-<N>-of-<planned>`` (:func:`launcher.workloads.elastic.cache_subfolder`), so the
first attempt at a size compiles and the later ones at that size take its graphs.

A cache file that does not load (a process killed while writing it) is compiled again by
MindSpore itself ("Failed to load the compilation cache file. Execute all the compilation
actions.").
"""

from __future__ import annotations

import os
from typing import MutableMapping, Optional

from launcher.workloads.elastic import cache_subfolder

__all__ = ["ENABLE_VAR", "OFFER_VAR", "PATH_VAR", "stop_caching", "use_offered_cache"]

#: The folder mslaunch offers (launcher.planning.job.envs.COMPILE_CACHE_OFFER; a test keeps them equal).
OFFER_VAR = "MSLAUNCH_COMPILE_CACHE"
ENABLE_VAR = "MS_COMPILER_CACHE_ENABLE"
PATH_VAR = "MS_COMPILER_CACHE_PATH"


def use_offered_cache(env: MutableMapping[str, str]) -> Optional[str]:
    """Turn MindSpore's compile cache on in the folder mslaunch offers (``env`` is normally
    ``os.environ``, before the first graph compiles), in a run smaller than planned in that size's
    subfolder.  Returns the folder, or None when nothing is offered or the user set either of
    MindSpore's variables."""
    folder = env.get(OFFER_VAR, "").strip()
    if not folder or ENABLE_VAR in env or PATH_VAR in env:
        return None
    sub = cache_subfolder(env)
    if sub:
        folder = os.path.join(folder, sub)
    env[ENABLE_VAR], env[PATH_VAR] = "1", folder
    return folder


def stop_caching(env: MutableMapping[str, str]) -> None:
    """No graph compiled from now on is taken from or written to the cache (an attempt that
    leaves out a graph the others compiled would shift the positions of the ones after it)."""
    env[ENABLE_VAR] = "0"
