"""The typical session page (queuewire.docs.session): its frames are one connection's real
exchange with the reference server, in the order the issue asks for, each value carried
from the reply that gave it to the request that uses it; and the same script, played against
the real bunqueue 2.9.5 (started with the script's token), is answered step by step with a
valid success of the same shape."""

from __future__ import annotations

import html
import json
import re
import socket

import pytest

from queuewire.codecs.bunqueue import UNDEFINED, FrameDecoder, FrameEncoder
from queuewire.codecs.validation import BunqueueValidator
from queuewire.docs.session import SessionError, fill, load_script, run
from queuewire.docs.text import stem
from queuewire.spec import load_profile, profile_names
from serve_process import (
    REAL_BUNQUEUE_MISSING,
    free_tcp_ports,
    kill_process_group,
    start_real_bunqueue_at,
)

DUMP = re.compile(r'<div class="qw-hexdump" ([^>]*)>')
ATTR = re.compile(r'data-([a-z]+)="([^"]*)"')
ORDER = ["Auth", "Hello", "PUSH", "PULL", "JobHeartbeat", "ACK"]


def _frames(text: str) -> list[tuple[str, bytes, object]]:
    out = []
    for attrs in DUMP.findall(text):
        a = {k: html.unescape(v) for k, v in ATTR.findall(attrs)}
        out.append((a["role"], bytes.fromhex(a["hex"]), json.loads(a["value"])))
    return out


@pytest.mark.parametrize("name", profile_names("bunqueue"))
def test_session_page_is_one_connections_exchange(generated, name):
    text = generated[f"protocols/{stem(name)}/session.md"]
    frames = _frames(text)
    assert len(frames) == 2 * len(ORDER), f"{len(frames)} dumps"
    requests, replies = frames[0::2], frames[1::2]
    assert [r[0] for r in requests] == ["daemon"] * 6 and [r[0] for r in replies] == ["client"] * 6
    decoder = FrameDecoder(name)
    req = [decoder.feed(data)[0] for _, data, _ in requests]
    rep = [decoder.feed(data)[0] for _, data, _ in replies]
    assert [r["cmd"] for r in req] == ORDER
    assert all(r["ok"] is True for r in rep), rep
    assert [r["reqId"] for r in rep] == [r["reqId"] for r in req]  # echoed (BQ-ENV-2)
    assert len({r["reqId"] for r in req}) == 6
    auth, hello, push, pull, beat, ack = req
    assert auth["token"] == load_script()["auth_token"]
    assert hello["protocolVersion"] == load_profile(name).model.protocol_version
    job, token = rep[2]["id"], rep[3]["token"]
    assert pull["owner"] and rep[3]["job"]["id"] == job     # the pushed job, locked to its owner
    assert isinstance(token, str) and token
    assert beat["id"] == ack["id"] == job and beat["token"] == ack["token"] == token
    for i, cmd in enumerate(ORDER, 1):
        assert f"## {i}. {cmd}" in text


def test_session_script_errors_name_the_step_and_rule():
    with pytest.raises(SessionError, match=r"step 3 \(PUSH\).*`\$\{job\}` is no value saved"):
        fill({"cmd": "ACK", "id": "${job}"}, {"auth_token": "x"}, "session.yaml step 3 (PUSH)")
    assert fill({"v": "${n}", "s": "a-${n}"}, {"n": 2}, "here") == {"v": 2, "s": "a-2"}


def test_session_runs_against_the_reference_server_each_build():
    """The job id and lock token are the server's: a second run draws new ones."""
    first, second = run(load_profile("bunqueue/v2")), run(load_profile("bunqueue/v2"))
    assert first[3].reply["token"] != second[3].reply["token"]
    assert [x.request_bytes for x in first[:2]] == [x.request_bytes for x in second[:2]]


@pytest.fixture(scope="module")
def real_bunqueue_with_token(tmp_path_factory):
    """npm bunqueue 2.9.5 under bun, its AUTH_TOKENS the session script's token; its port."""
    if REAL_BUNQUEUE_MISSING:
        pytest.fail(REAL_BUNQUEUE_MISSING)
    log = tmp_path_factory.mktemp("session") / "bunqueue.log"
    port, http_port = free_tcp_ports(2)
    proc = start_real_bunqueue_at(log, port, http_port,
                                  env={"AUTH_TOKENS": str(load_script()["auth_token"])})
    try:
        yield port
    finally:
        kill_process_group(proc)


def _keys(reply: dict) -> set[str]:
    """A reply's keys, without those whose value is JavaScript's undefined (absent)."""
    return {k for k, v in reply.items() if v is not UNDEFINED}


def test_session_is_answered_alike_by_the_real_bunqueue(real_bunqueue_with_token):
    """The documented session, played against npm bunqueue 2.9.5 (AUTH_TOKENS set to the
    script's token): every step is a valid success with the keys the page shows."""
    name = "bunqueue/2.9.5"
    profile = load_profile(name)
    script = load_script()
    documented = run(profile)
    env = {"auth_token": script["auth_token"], "protocol_version": profile.model.protocol_version}
    encoder, decoder, validator = FrameEncoder(name), FrameDecoder(name), BunqueueValidator(name)
    with socket.create_connection(("127.0.0.1", real_bunqueue_with_token), timeout=10) as sock:
        for i, (step, ours) in enumerate(zip(script["steps"], documented, strict=True), 1):
            request = fill(step["send"], env, f"step {i}")
            sock.sendall(encoder.encode(request))
            got: list = []
            while not got:
                chunk = sock.recv(65536)
                assert chunk, f"step {i}: bunqueue closed the connection"
                got = decoder.feed(chunk)
            (reply,) = got
            cmd = request["cmd"]
            assert reply.get("ok") is True, f"step {i} {cmd}: bunqueue answered {reply}"
            assert not validator.reply_violations(cmd, reply), (cmd, reply)
            assert _keys(reply) == _keys(ours.reply), (cmd, sorted(reply), sorted(ours.reply))
            if cmd == "PULL":
                assert _keys(reply["job"]) == _keys(ours.reply["job"])
            for var, key in (step.get("save") or {}).items():
                env[var] = reply[key]
