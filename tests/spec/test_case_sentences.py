"""A case cites the sentence it tests (issue 25): the Clean cases each lead with the
requirement whose quote is the clause they break, not one requirement quoting another clause
of the same command."""

from __future__ import annotations

import pytest

from queuewire.conformance.runner import load_cases
from queuewire.spec import load_profile

PROFILE = load_profile("bunqueue/v2")
CASES = {c.id: c for c in load_cases("bunqueue", "bunqueue/v2")}


@pytest.mark.parametrize(("case_id", "clause"), [
    ("bunqueue.queue.clean-grace", "jobs older than this are removed"),
    ("bunqueue.queue.clean-state-filter", "optionally filtered by state"),
    ("bunqueue.queue.clean-limit", "Max jobs to remove"),
])
def test_each_clean_case_leads_with_the_sentence_it_tests(case_id, clause):
    first = CASES[case_id].requirements[0]      # the requirement its checks cite by default
    assert clause in PROFILE.requirements[first].quote, (case_id, first)
