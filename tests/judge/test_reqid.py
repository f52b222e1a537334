"""One reqId identity (issue 23): when two reqIds are the same, for every tool that pairs a
reply with its request: the tap (traffic), conform (server context and client checker) and the
fuzz oracles all key by queuewire.judge.reqid_key."""

from __future__ import annotations

import math

import pytest

from queuewire.codecs.bunqueue import UNDEFINED, encode_frame
from queuewire.judge import reqid_key
from queuewire.traffic.analyzer import Analyzer


@pytest.mark.parametrize("a, b", [
    ("r1", "r1"), (1, 1.0), (2**53, float(2**53)), (math.nan, math.nan),
    ({"a": 1, "b": [2]}, {"b": [2], "a": 1.0}), (b"\x01", bytearray(b"\x01")), ([1, "x"], (1, "x")),
])
def test_the_same_reqid(a, b):
    assert reqid_key(a) == reqid_key(b) and hash(reqid_key(a)) == hash(reqid_key(b))


@pytest.mark.parametrize("a, b", [
    (True, 1), (False, 0), (None, UNDEFINED), ("1", 1), (1.5, 1), ({"a": 1}, [["a", 1]]),
    (None, False), (b"1", "1"),
])
def test_different_reqids(a, b):
    """Python's True == 1 and 1 == 1.0 rules are not the wire's: true is not 1."""
    assert reqid_key(a) != reqid_key(b)


def test_a_string_is_itself_and_every_key_is_hashable():
    assert reqid_key("abc") == "abc"
    for value in ({"k": [1, {"n": None}]}, [UNDEFINED], math.inf, -0.0, 2**70):
        hash(reqid_key(value))


def _tap(requests: list[dict], replies: list[dict]) -> dict:
    analyzer = Analyzer("bunqueue", "bunqueue/v2")
    analyzer.open(1, 1)
    analyzer.feed(1, "c2s", b"".join(encode_frame(m) for m in requests), 10)
    analyzer.feed(1, "s2c", b"".join(encode_frame(m) for m in replies), 20)
    analyzer.close(1, 30)
    return analyzer.summary()


def test_the_tap_pairs_by_the_judges_identity():
    """A reply echoing 1.0 answers the request sent with 1; one echoing 1 does not answer a
    request sent with true (it used to: Python hashes True and 1 alike)."""
    same = _tap([{"cmd": "Ping", "reqId": 1}], [{"ok": True, "reqId": 1.0}])
    assert same["totals"]["paired"] == 1
    other = _tap([{"cmd": "Ping", "reqId": True}], [{"ok": True, "reqId": 1}])
    assert other["totals"]["paired"] == 0
    assert {f["kind"] for f in other["findings"]} >= {"reqid_unknown"}


@pytest.mark.parametrize("value, key", [
    (UNDEFINED, ("undefined",)), (None, ("const", None)), (True, ("const", True)),
    (math.nan, ("nan",)), (2.0, ("num", 2)), (1.5, ("num", 1.5)), (7, ("num", 7)),
    ({"a": 1}, ("map", (("'a'", ("num", 1)),))), ([1, "x"], ("list", (("num", 1), "x"))),
    (b"\x01", ("bin", b"\x01")),
])
def test_the_key_of_each_kind_of_value(value, key):
    """The keys themselves, not only their equality: the trace pipeline writes a request's
    key into its rows (``opens``) and joins the files of one connection on it, so it is a
    format, and an integral float is keyed by the int it equals (``('num', 2)``, not 2.0)."""
    got = reqid_key(value)
    assert got == key and repr(got) == repr(key)


def test_maps_and_lists_differ_by_every_key_and_value():
    assert reqid_key({"a": 1}) != reqid_key({"b": 1})
    assert reqid_key({"a": 1}) != reqid_key({"a": 2})
    assert reqid_key({1: "x"}) != reqid_key({"1": "x"})
    assert reqid_key([1]) != reqid_key([2])


def test_other_values_are_keyed_by_their_type_and_repr():
    import datetime

    class One:
        def __repr__(self) -> str:
            return "same"

    class Two(One):
        pass

    assert reqid_key(One()) == ("One", "same") and reqid_key(One()) != reqid_key(Two())
    assert reqid_key(datetime.date(2020, 1, 1)) != reqid_key(datetime.date(2021, 1, 1))
