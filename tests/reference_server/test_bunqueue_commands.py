"""The command table of the bunqueue engine (issue 23): every command is a plain function
registered under its spec name (``commands.registry``), bound to the engine when it is built;
nothing else makes a handler."""

from __future__ import annotations

import copy
import dataclasses
import types

import pytest

from queuewire.reference_server.bunqueue.commands import COMMANDS, command
from queuewire.reference_server.bunqueue.engine import BunqueueEngine
from queuewire.spec import load_profile, profile_names


@pytest.mark.parametrize("name", profile_names("bunqueue"))
def test_every_command_of_every_profile_has_its_handler_bound(name):
    profile = load_profile(name)
    engine = BunqueueEngine(profile, now_ms=lambda: 1_000_000.0)
    assert set(profile.model.commands) <= set(COMMANDS)
    for cmd in profile.model.commands:
        handler = engine._handlers[cmd]
        assert isinstance(handler, types.MethodType)
        assert handler.__func__ is COMMANDS[cmd] and handler.__self__ is engine


def test_a_command_registered_twice_is_refused_naming_both():
    def again(engine, conn_id, req, now):
        return {"ok": True}

    with pytest.raises(ValueError, match=r"command PUSH has two handlers: push and .*again"):
        command("PUSH")(again)
    assert COMMANDS["PUSH"].__name__ == "push"


def test_a_profile_command_without_a_handler_stops_the_engine_being_built():
    profile = load_profile("bunqueue/v2")
    extra = dict(profile.model.commands)
    extra["Frobnicate"] = profile.model.commands["Ping"]
    edited = copy.copy(profile)
    object.__setattr__(edited, "model", dataclasses.replace(profile.model, commands=extra))
    with pytest.raises(ValueError, match="bunqueue/v2: no handler for command Frobnicate"):
        BunqueueEngine(edited, now_ms=lambda: 1_000_000.0)


def test_a_handler_answers_through_the_engine():
    engine = BunqueueEngine("bunqueue/v2", now_ms=lambda: 1_000_000.0)
    assert engine.handle("c1", {"cmd": "Ping"}) == {"ok": True, "data": {"pong": True,
                                                                          "time": 1_000_000.0}}
