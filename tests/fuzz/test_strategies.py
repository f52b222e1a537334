"""The case mix's slow trickles and interleavings: small shares of the cases, within their
bounds (well under the runner's bound and the spec's partial-frame timeouts), each a pure
function of ``(seed, index)`` like every other case."""

from __future__ import annotations

import re

from queuewire.fuzz import strategies as s
from queuewire.fuzz.runner import DEFAULT_BOUND
from queuewire.fuzz.strategies import make_case
from queuewire.spec import load_profile

CASES = 800


def _partial_frame_timeout(profile: str, rid: str) -> float:
    """The default partial-frame timeout the requirement states ("(60 s by default)")."""
    text = load_profile(profile).requirement(rid).text
    return float(re.search(r"\((\d+) s by default\)", text).group(1))


def test_trickles_stay_far_under_the_bound_and_the_partial_frame_timeouts():
    budget = s.TRICKLE_TOTAL_MS / 1000.0
    assert budget <= DEFAULT_BOUND / 10
    assert budget <= _partial_frame_timeout("bunqueue/v2", "BQ-FLOW-3") / 1000
    assert budget <= _partial_frame_timeout("quicx/v1", "QX-FLOW-3") / 1000


def test_trickles_and_interleavings_are_small_shares_within_their_bounds():
    cases = [make_case("bunqueue", "bunqueue/v2", 5, i) for i in range(CASES)]
    interleaved = [c for c in cases if c.conns]
    trickles = [c for c in cases if c.pauses and not c.conns]
    assert 0.01 * CASES <= len(interleaved) <= 0.06 * CASES
    assert 1 <= len(trickles) <= 0.02 * CASES
    for c in trickles:
        assert "trickle" in c.labels and 1 <= len(c.pauses) < s.TRICKLE_WRITES
        assert sum(c.pauses) <= s.TRICKLE_TOTAL_MS and len(c.writes()) >= 2
        assert b"".join(w for _, w, _ in c.writes()) == c.stream
    for c in interleaved:
        assert len(c.conns) == len(c.frames) and 2 <= c.connections <= s.MAX_CONNECTIONS
        assert len(set(c.conns)) >= 2 and f"interleave:{c.connections}" in c.labels
        assert len(c.split_conns) == len(c.splits) and sum(c.pauses) <= s.TRICKLE_TOTAL_MS
        writes = c.writes()
        assert len(writes) == len(c.splits)   # the plan names every write
        for n in range(c.connections):        # each connection's bytes in its own order
            assert b"".join(w for k, w, _ in writes if k == n) == c.sub_case(n).stream
    # some interleavings cut one connection's frame around another connection's write
    assert any(_cut_around(c) for c in interleaved)
    assert any("cross_duplicate" in c.labels for c in interleaved)


def _cut_around(case) -> bool:
    """Whether a write of one connection ends inside a frame and another's comes next."""
    ends: dict[int, set[int]] = {}
    for n in range(case.connections):
        pos, ends[n] = 0, set()
        for f in case.sub_case(n).frames:
            pos += len(f)
            ends[n].add(pos)
    done = dict.fromkeys(range(case.connections), 0)
    writes = case.writes()
    for k, (n, data, _) in enumerate(writes[:-1]):
        done[n] += len(data)
        if done[n] not in ends[n] and done[n] and writes[k + 1][0] != n:
            return True
    return False


def test_special_cases_are_functions_of_seed_and_index():
    found = [i for i in range(400) if make_case("bunqueue", "bunqueue/v2", 5, i).conns][:3]
    found += [i for i in range(400) if make_case("bunqueue", "bunqueue/v2", 5, i).pauses][:3]
    assert len(found) >= 4
    for i in found:
        a = make_case("bunqueue", "bunqueue/v2", 5, i)
        make_case("bunqueue", "bunqueue/v2", 5, i + 1)
        assert make_case("bunqueue", "bunqueue/v2", 5, i).as_dict() == a.as_dict()


def test_quicx_cases_trickle_too():
    trickles = [c for c in (make_case("quicx", "quicx/v1", 4, i) for i in range(700))
                if c.pauses]
    assert trickles and all(not c.conns for c in trickles)
    assert all(sum(c.pauses) <= s.TRICKLE_TOTAL_MS and "trickle" in c.labels
               for c in trickles)
