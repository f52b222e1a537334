"""The error replies on the command and message entries (queuewire.docs.errors derives them
from the spec's error descriptions): every error of the spec is on some entry, and what
the reference server really answers a command with is on that command's entry."""

from __future__ import annotations

import re

import pytest

from queuewire.codecs.quicx import decode
from queuewire.docs import examples
from queuewire.docs.text import label, stem
from queuewire.reference_server.bunqueue import BunqueueServer, Wait
from queuewire.reference_server.quicx import QuicxConnection, QuicxEngine, Send
from queuewire.spec import load_profile, profile_names
from queuewire.spec.bunqueue import error_pattern
from queuewire.vectors import from_json

BUNQUEUE = profile_names("bunqueue")
QUICX = profile_names("quicx")


def _entries(generated, name: str, pages: str, kind: str) -> dict[str, str]:
    """entry label -> the entry's "Error replies" block (to the next bold heading)."""
    text = "".join(v for k, v in generated.items()
                   if k.startswith(f"protocols/{stem(name)}/{pages}"))
    parts = re.split(rf"^\(({re.escape(stem(name))}-{kind}-[^)]*)\)=$", text, flags=re.M)
    out = {}
    for i in range(1, len(parts) - 1, 2):
        body = parts[i + 1]
        assert "**Error replies**" in body, f"{parts[i]} has no error replies"
        block = body.split("**Error replies**", 1)[1]
        out[parts[i]] = re.split(r"^\*\*", block, maxsplit=1, flags=re.M)[0]
    return out


class _Conn:
    """An authenticated connection of the request gate (no rate limit, no frames)."""

    id, authenticated, rate, decoder = "docs-test", True, None, None


@pytest.mark.parametrize("name", BUNQUEUE)
def test_reference_server_refusals_are_on_their_command(generated, name):
    """Each command's request vector (ids of jobs, crons, workers that do not exist) sent to
    the reference server's request path: an error reply must be one the entry lists."""
    profile = load_profile(name)
    errors = profile.model.errors
    entries = _entries(generated, name, "commands-", "cmd")
    server = BunqueueServer(profile, port=0)
    server.engine.connection_opened(_Conn.id)
    refused, missing = 0, []
    for cmd in profile.model.commands:
        vec = examples.bunqueue_example(profile, cmd, "request")
        if vec is None:
            continue
        reply = server.gate.answer(_Conn(), from_json(vec["value"]))
        if isinstance(reply, Wait) or reply.get("ok") is not False:
            continue
        refused += 1
        given = [e for e in errors if error_pattern(errors[e].message).fullmatch(reply["error"])]
        assert given, f"{cmd}: {reply['error']!r} is no error string of the spec"
        block = entries[label(name, "cmd", cmd)]
        if not any(f"`{e}`" in block for e in given):
            missing.append(f"{cmd}: {reply['error']!r} ({' or '.join(given)})")
    assert refused >= 15, f"only {refused} vector requests were refused: the test sees little"
    assert not missing, "refusals of the reference server missing from their command:\n  " + \
        "\n  ".join(missing)


@pytest.mark.parametrize("name", BUNQUEUE)
def test_every_bunqueue_error_is_on_a_command(generated, name):
    profile = load_profile(name)
    entries = _entries(generated, name, "commands-", "cmd")
    assert len(entries) == len(profile.model.commands)
    listed = "".join(entries.values())
    lost = [e for e in profile.model.errors if f"`{e}`" not in listed]
    assert not lost, f"{name}: errors on no command's entry: {lost}"
    # a refusal before any command runs is named on every entry, never as one command's own
    auth = entries[label(name, "cmd", "Auth")]
    assert "`invalid_token`" in auth.split("Like any request")[0]
    assert "`not_authenticated`" not in auth, "Auth is the one command never refused so"
    ping = entries[label(name, "cmd", "Ping")]
    assert "`not_authenticated`" in ping.split("Like any request")[1]


@pytest.mark.parametrize("name", QUICX)
def test_every_quicx_reply_error_is_on_a_message(generated, name):
    spec = load_profile(name).model
    entries = _entries(generated, name, "messages", "msg")
    assert len(entries) == len(spec.messages)
    listed = "".join(entries.values())
    # a layout check of a message only clients receive (MSG_TASK's len_type) answers nobody
    clients_only = {k for m in spec.messages.values()
                    if not any(r == "daemon" for _, r in m.directions)
                    for k in [*m.errors.values(), *(k for f in m.layout for k in f.errors.values())]}
    replied = [k.name for k in spec.protocol_errors.values() if k.reaction == "reply"]
    lost = [k for k in replied if f"`{k}`" not in listed and k not in clients_only]
    assert replied and not lost, f"{name}: reply errors on no message's entry: {lost}"
    for msg in spec.messages.values():
        block = entries[label(name, "msg", msg.name)]
        for kind in {*msg.errors.values(), *(k for f in msg.layout for k in f.errors.values())}:
            if kind not in clients_only and spec.protocol_errors[kind].reaction == "reply":
                assert f"| `{kind}` |" in block, f"{msg.name}: its layout's {kind} is not listed"


@pytest.mark.parametrize("name", QUICX)
def test_reference_daemon_refusals_are_on_their_message(generated, name):
    """Each message's example frames (from the test vectors), sent to a fresh connection of
    the reference quicx daemon, in their direction or not: every MSG_ERROR it answers carries
    the code of an error the message's entry lists."""
    profile = load_profile(name)
    spec = profile.model
    entries = _entries(generated, name, "messages", "msg")
    codes = {c.code: c.name for c in spec.error_codes.values()}
    refused, missing = 0, []
    for msg in spec.messages.values():
        block = entries[label(name, "msg", msg.name)]
        listed = {k.error_code for k in spec.protocol_errors.values() if f"`{k.name}`" in block}
        for _, vec in examples.quicx_examples(profile, msg.name):
            conn = QuicxConnection(QuicxEngine(profile))
            conn.receive_data(bytes.fromhex(vec["hex"]))
            for action in conn.next_actions():
                if isinstance(action, Send) and action.message == "MSG_ERROR":
                    (reply,) = decode(profile, action.frame, "producer")
                    code = codes[reply.fields["error_code"]]
                    refused += 1
                    if code not in listed:
                        missing.append(f"{msg.name} ({vec['id']}): MSG_ERROR {code}")
    assert refused >= 4, f"only {refused} refusals: the test sees little"
    assert not missing, "refusals of the reference daemon missing from their message:\n  " + \
        "\n  ".join(missing)
