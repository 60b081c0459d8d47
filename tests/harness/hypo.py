"""How many examples a Hypothesis property test tries.

``make test`` tries every property test's full count; ``make test-fast`` (the edit-test loop)
sets ``MSLAUNCH_FAST_TESTS=1`` and tries a tenth of it (at least 20): the same properties, fewer
random inputs. (Hypothesis's profiles cannot do this: a test's own ``@settings(max_examples=...)``
wins over the loaded profile.)
"""

from __future__ import annotations

import os

__all__ = ["examples"]

FAST = os.environ.get("MSLAUNCH_FAST_TESTS", "") not in ("", "0")


def examples(n: int) -> int:
    """``n``, or a tenth of it (at least 20) under ``make test-fast``."""
    return max(20, n // 10) if FAST else n
