"""A pytest plugin for `make mutation` runs (loaded with ``-p qw_mutation_plugin``; not a test).

1. Hypothesis without its example database (a failure found for one mutant must not be
   replayed for the next), derandomized (the same examples every run: a mutant is killed or
   survives for good) and without deadlines (the trampolines slow every call; a deadline miss
   is not a kill).
2. Which tests run a function. mutmut gives a function to the test in whose run it was called
   (between two teardowns). A function called while a test MODULE is imported (``VALIDATOR =
   BunqueueValidator(PROFILE)`` at the top of a test file) or while a session/module/class
   fixture is set up would go to the first test that happened to run, and its mutants would be
   tested by that test alone. In mutmut's stats run this plugin gives such a function to every
   test of that module, or to every test that uses that fixture.
"""

from __future__ import annotations

import pytest
from hypothesis import settings

settings.register_profile("qw-mutation", database=None, derandomize=True, deadline=None,
                          print_blob=False)
settings.load_profile("qw-mutation")

_by_module: dict[str, set[str]] = {}   # test file path -> functions run while importing it
_by_fixture: dict[tuple[str, str], set[str]] = {}  # (baseid, name) -> functions run setting it up


def _stats_run() -> bool:
    try:
        from mutmut.mutation.trampoline import get_mutant_under_test
    except ImportError:  # not under mutmut 3.8
        return False
    return get_mutant_under_test() == "stats"


def _state():
    from mutmut.state import state
    return state()


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    if not (_stats_run() and isinstance(collector, pytest.Module)):
        yield
        return
    hits = _state()._stats
    before = set(hits)
    hits.clear()
    yield
    _by_module.setdefault(str(collector.path), set()).update(hits)
    hits.clear()
    hits.update(before)


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef, request):
    if not _stats_run() or fixturedef.scope == "function":
        yield
        return
    hits = _state()._stats
    before = set(hits)
    hits.clear()
    yield
    _by_fixture.setdefault((fixturedef.baseid, fixturedef.argname), set()).update(hits)
    hits.update(before)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item, nextitem):
    if not _stats_run():
        return
    tests = _state().tests_by_mangled_function_name
    nodeid = item.nodeid.removeprefix("mutants/")
    functions = set(_by_module.get(str(item.path), ()))
    for name in getattr(item, "fixturenames", ()):
        for (baseid, argname), hit in _by_fixture.items():
            if argname == name and item.nodeid.startswith(baseid):
                functions |= hit
    for function in functions:
        tests[function].add(nodeid)
