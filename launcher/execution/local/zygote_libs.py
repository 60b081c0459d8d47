"""What libraries the zygote preloaded computed at their import, redone in each forked rank as a
plain process's import would have done it (stdlib only; used by
:mod:`launcher.execution.local.zygote_child` in the child, before the program runs)."""

from __future__ import annotations

import os
import sys
from typing import List


def argv_at_import(argv: List[str]) -> None:
    """Module state that a preloaded library computed from ``sys.argv`` and ``sys.path`` when the
    zygote imported it, computed again from the rank's own, as its import in a plain process
    would have: ``mindspore.graph.api``'s ``entry_script_path`` (``realpath(sys.argv[0])``: the
    script, or the module's file under ``python -m``) and ``sys_path`` (``sys.path`` without the
    script's folder).  MindSpore's compile cache (``MS_COMPILER_CACHE_ENABLE``) hashes that
    script and the files it imports to tell a changed program; with the zygote's values it would
    hash the zygote's own files and reuse graphs of a program that changed."""
    api = sys.modules.get("mindspore.graph.api")
    if api is None or not hasattr(api, "entry_script_path"):
        return
    first = argv[0]
    if first == "-m":
        import importlib.util

        try:
            spec = importlib.util.find_spec(argv[1])
            if spec is not None and spec.submodule_search_locations is not None:  # a package: its __main__
                spec = importlib.util.find_spec(argv[1] + ".__main__")
            first = spec.origin if spec is not None and spec.origin else argv[1]
        except (ImportError, ValueError):
            first = argv[1]  # python -m fails on it anyway
    paths = list(sys.path)
    entry = None
    if first != "":
        entry = os.path.realpath(first)
        folder = os.path.split(entry)[0]
        if folder in paths:
            paths.remove(folder)
    setattr(api, "entry_script_path", entry)  # the module's own globals (hasattr above)
    setattr(api, "sys_path", paths)


def reseed() -> None:
    """New entropy for every generator a new process seeds at import and the zygote's import
    already seeded: Python's ``random`` reseeds itself at fork (its ``register_at_fork`` hook);
    numpy's legacy global ``RandomState`` (``numpy.random.rand``, ``shuffle``, ...), seeded once
    when ``numpy.random`` is imported, does not, and would draw the same numbers on every rank.
    MindSpore's generators seed themselves at first use, in the child (checked by
    ``tests/execution/local/test_zygote_conformance.py``, which compares the generators of two fresh
    imports with those of two forked children)."""
    mtrand = sys.modules.get("numpy.random.mtrand")
    if mtrand is not None:
        mtrand._rand.seed()  # no argument: fresh OS entropy, as at import
