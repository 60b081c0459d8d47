"""The ``mindspore`` marker is the requirement: a test marked so is skipped without MindSpore, and
failed in CI (tests/conftest.py calls :func:`tests.harness.mindspore.require_mindspore` with the
marker's keyword arguments before the test's fixtures run)."""

from __future__ import annotations

import pytest

import tests.harness.mindspore as ms
from tests.conftest import pytest_runtest_setup


class Item:
    def __init__(self, mark=None) -> None:
        self.mark = mark.mark if mark is not None else None

    def get_closest_marker(self, name: str):
        return self.mark if self.mark is not None and self.mark.name == name else None

    def iter_markers(self, name: str):
        return [self.mark] if self.mark is not None and self.mark.name == name else []


@pytest.fixture
def no_mindspore(monkeypatch):
    monkeypatch.setattr(ms, "HAVE_MS", False)
    return monkeypatch


def test_without_mindspore_a_marked_test_is_skipped_outside_ci(no_mindspore):
    no_mindspore.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match=r"^mindspore not installed \(pip install -e '\.\[train\]'\)$"):
        pytest_runtest_setup(Item(pytest.mark.mindspore))


def test_without_mindspore_a_marked_test_fails_in_ci(no_mindspore):
    no_mindspore.setenv("CI", "1")
    with pytest.raises(pytest.fail.Exception, match=r"^mindspore is missing in CI"):
        pytest_runtest_setup(Item(pytest.mark.mindspore))


def test_the_markers_arguments_are_the_requirements(monkeypatch):
    monkeypatch.setattr(ms, "HAVE_MS", True)
    monkeypatch.setenv("CI", "true")
    pytest_runtest_setup(Item(pytest.mark.mindspore))  # installed: nothing to say
    with pytest.raises(pytest.fail.Exception, match=r"^mindspore \(with msrun\) is missing in CI"):
        pytest_runtest_setup(Item(pytest.mark.mindspore(also=False, what="mindspore (with msrun)")))


def test_an_unmarked_test_needs_nothing(no_mindspore):
    no_mindspore.setenv("CI", "1")
    pytest_runtest_setup(Item())


# ---------------------------------------------------------------- needs(...): the same rule, other parts


def test_a_missing_need_skips_outside_ci_and_fails_in_ci(monkeypatch):
    from tests.harness import needs

    monkeypatch.setitem(
        needs.NEEDS, "ssh-keygen", (lambda: False, "ssh-keygen not installed (x)", "ssh-keygen is missing in CI (y)")
    )
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match=r"^ssh-keygen not installed \(x\)$"):
        pytest_runtest_setup(Item(pytest.mark.needs("ssh-keygen")))
    monkeypatch.setenv("CI", "1")
    with pytest.raises(pytest.fail.Exception, match=r"^ssh-keygen is missing in CI \(y\)$"):
        pytest_runtest_setup(Item(pytest.mark.needs("ssh-keygen")))
    monkeypatch.setitem(needs.NEEDS, "ssh-keygen", (lambda: True, "", ""))
    pytest_runtest_setup(Item(pytest.mark.needs("ssh-keygen")))  # there: nothing to say


def test_an_unknown_need_is_refused_naming_the_test():
    from tests.harness.needs import check_names

    with pytest.raises(
        ValueError, match=r"^t::x: pytest.mark.needs\('sshkeygen',\): unknown; known: ssh-keygen, installed"
    ):
        check_names(["sshkeygen", "root"], "t::x")
