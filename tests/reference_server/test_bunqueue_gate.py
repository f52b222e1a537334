"""The request gate, sans-IO (issue 23): the rules every request passes before the engine, in
their order, without a socket; the TCP and the embedded server answer through it."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from queuewire.reference_server.bunqueue.engine import BunqueueEngine
from queuewire.reference_server.bunqueue.gate import RequestGate
from queuewire.spec import load_profile

PROFILE = load_profile("bunqueue/v2")
ERRORS = {name: e.message for name, e in PROFILE.model.errors.items()}


@dataclass
class Conn:
    id: str = "c1"
    authenticated: bool = False
    rate: Any = None
    decoder: Any = None


class Spent:
    def allow(self) -> bool:
        return False


def gate(*tokens: str) -> RequestGate:
    return RequestGate(BunqueueEngine(PROFILE, now_ms=lambda: 1_000_000.0), tokens)


def test_the_rules_in_their_order():
    g = gate("s3cret")
    assert g.answer(Conn(rate=Spent()), "not even a map")["error"] == ERRORS["rate_limit_exceeded"]
    assert g.answer(Conn(), ["Ping"])["error"] == ERRORS["invalid_command"]
    assert g.answer(Conn(), {"cmd": "Ping"})["error"] == ERRORS["not_authenticated"]
    # Auth itself passes the auth rule, but not the schema (a token must be a string)
    refused = g.answer(Conn(), {"cmd": "Auth", "token": 5})
    assert refused["ok"] is False and refused["error"] != ERRORS["not_authenticated"]
    assert g.answer(Conn(), {"cmd": "Auth", "token": "wrong"})["error"] == ERRORS["invalid_token"]


def test_auth_authenticates_the_connection_and_lifts_its_pre_auth_frame_bound():
    g, conn = gate("s3cret"), Conn(decoder=SimpleNamespace(max_frame_bytes=1024))
    assert g.answer(conn, {"cmd": "Auth", "token": "s3cret"}) == {"ok": True}
    assert conn.authenticated and conn.decoder.max_frame_bytes == PROFILE.model.max_frame_bytes
    assert g.answer(conn, {"cmd": "PUSH", "queue": "q", "data": {}})["ok"] is True


def test_without_tokens_the_engine_answers_and_auth_is_its_business():
    g = gate()
    assert g.answer(Conn(), {"cmd": "PUSH", "queue": "q", "data": {}})["ok"] is True
    assert g.error("invalid_token") == {"ok": False, "error": ERRORS["invalid_token"]}


class Open:
    def allow(self) -> bool:
        return True


def test_a_rate_window_with_room_lets_the_request_through():
    assert gate().answer(Conn(rate=Open()), {"cmd": "PUSH", "queue": "q", "data": {}})["ok"] is True


def test_an_authenticated_connection_passes_the_auth_rule_and_auth_again_is_checked():
    g = gate("s3cret", "other")
    conn = Conn(authenticated=True)
    assert g.answer(conn, {"cmd": "Ping"})["ok"] is True
    assert g.answer(conn, {"cmd": "Auth", "token": "nope"})["error"] == ERRORS["invalid_token"]
    # the second token is accepted too; a connection without a decoder has no bound to lift
    fresh = Conn()
    assert g.answer(fresh, {"cmd": "Auth", "token": "other"}) == {"ok": True}
    assert fresh.authenticated and fresh.decoder is None


def test_a_request_breaking_its_schema_gets_the_engines_refusal():
    g = gate()
    missing = g.answer(Conn(), {"cmd": "PUSH", "queue": "q"})
    assert missing["ok"] is False and missing["error"].startswith(
        ERRORS["invalid_request"].split("{")[0])
    unknown = g.answer(Conn(), {"cmd": "Frobnicate"})
    assert unknown == g.error("unknown_command", cmd="Frobnicate")
    assert unknown["error"] == ERRORS["unknown_command"].format(cmd="Frobnicate")


def test_the_gate_validates_by_its_engines_profile():
    real = load_profile("bunqueue/2.9.5")
    g = RequestGate(BunqueueEngine(real, now_ms=lambda: 1_000_000.0))
    assert g.answer(Conn(), {"cmd": "SubscribeEvents", "queue": "q"}) == {"ok": True}
    assert gate().answer(Conn(), {"cmd": "SubscribeEvents", "queue": "q"}) == \
        gate().error("unknown_command", cmd="SubscribeEvents")


def test_the_engine_is_told_which_connection_asks():
    g = gate()
    conn = Conn(id="c7")
    g.answer(conn, {"cmd": "PUSH", "queue": "q", "data": {}})
    pulled = g.answer(conn, {"cmd": "PULL", "queue": "q"})
    assert g.engine.connection_closed("c7") == [pulled["job"]["id"]]   # BQ-CONN-1: its job
