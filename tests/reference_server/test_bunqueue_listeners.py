"""The engine's hooks are registered, never reassigned (issue 23): each shell (TCP,
HTTP/WebSocket, embedded) listens for job events and pushed frames beside the others and
stops listening on its own; a failing hook breaks neither the engine nor the other hooks."""

from __future__ import annotations

from queuewire.reference_server.bunqueue.engine import BunqueueEngine

PROFILE = "bunqueue/2.9.5"  # the profile with pushed job events (SubscribeEvents)


def _engine() -> BunqueueEngine:
    return BunqueueEngine(PROFILE, now_ms=lambda: 1_000_000.0)


def test_every_listener_hears_every_event_and_frame_until_it_unlistens():
    engine = _engine()
    a_events, b_events, a_frames, b_frames = [], [], [], []
    stop_a = engine.listen(notify=a_events.append, publish=lambda c, f: a_frames.append((c, f)))
    engine.listen(notify=b_events.append, publish=lambda c, f: b_frames.append((c, f)))
    assert engine.handle("sub", {"cmd": "SubscribeEvents", "queue": "q"})["ok"] is True
    assert engine.handle("c1", {"cmd": "PUSH", "queue": "q", "data": {}})["ok"] is True
    assert a_events and a_events == b_events
    assert a_frames and a_frames == b_frames and a_frames[0][0] == ("sub",)
    stop_a()
    stop_a()  # twice is harmless
    engine.handle("c1", {"cmd": "PUSH", "queue": "q", "data": {}})
    assert len(b_events) > len(a_events) and len(b_frames) == 2 * len(a_frames)


def test_a_failing_listener_does_not_silence_the_others(caplog):
    engine = _engine()
    heard = []

    def broken(event):
        raise RuntimeError("a shell bug")

    engine.listen(notify=broken, publish=lambda c, f: 1 / 0)
    engine.listen(notify=heard.append)
    engine.handle("sub", {"cmd": "SubscribeEvents", "queue": "q"})
    assert engine.handle("c1", {"cmd": "PUSH", "queue": "q", "data": {}})["ok"] is True
    assert heard
    assert "notify failed" in caplog.text and "publish failed" in caplog.text


def test_the_owners_hooks_come_first_and_stay_beside_the_shells():
    order = []
    engine = BunqueueEngine(PROFILE, now_ms=lambda: 1_000_000.0, notify=lambda e: order.append("owner"))
    engine.listen(notify=lambda e: order.append("shell"))
    engine.handle("c1", {"cmd": "PUSH", "queue": "q", "data": {}})
    assert order[:2] == ["owner", "shell"]
