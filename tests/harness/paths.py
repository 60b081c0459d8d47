"""Where the repository and its tests are, for tests at any depth of the tree."""

import os

#: The repository's root folder.
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: ``tests/``.
TESTS = os.path.join(REPO, "tests")
