"""How a client opens a connection (BQ-HELLO-1, issue 23): one rule, judged alike by
conform client and by the tap."""

from __future__ import annotations

import pytest

from queuewire.codecs.bunqueue import encode_frame
from queuewire.judge import opens_with_hello
from queuewire.traffic.analyzer import Analyzer


@pytest.mark.parametrize("commands, verdict", [
    ([], None), (["Hello"], True), (["Auth"], None), (["Auth", "Hello"], True),
    (["Ping"], False), (["Auth", "PUSH"], False), (["Hello", "Hello"], True), (["PUSH", "Hello"], False),
])
def test_the_opening_rule(commands, verdict):
    assert opens_with_hello(commands) is verdict


def _tap(*commands: str) -> list[dict]:
    analyzer = Analyzer("bunqueue", "bunqueue/v2")
    analyzer.open(1, 1)
    frames = b"".join(encode_frame({"cmd": c, "reqId": str(i)} | ({"token": "t"} if c == "Auth" else {}))
                      for i, c in enumerate(commands))
    analyzer.feed(1, "c2s", frames, 10)
    analyzer.close(1, 20)
    return [f for f in analyzer.summary()["findings"] if f["requirement"] == "BQ-HELLO-1"]


def test_the_tap_flags_a_client_that_never_sends_hello():
    """The tap flagged nothing where conform client said BQ-HELLO-1: now both do, once per
    connection, at the requirement's level (a stated SHOULD: NON-STRICT)."""
    [finding] = _tap("Ping", "Ping", "Hello")
    assert finding["level"] == "NON-STRICT" and finding["kind"] == "no_hello"
    assert "Ping" in finding["message"]
    assert _tap("Hello", "Ping") == [] and _tap("Auth", "Hello", "Ping") == []
    assert len(_tap("Auth", "Ping")) == 1
    assert _tap("Auth") == []  # closed before it could be told: nothing said
