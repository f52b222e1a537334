"""The typical session page of a bunqueue profile: one worker connection (Auth, Hello, PUSH,
PULL with an owner, JobHeartbeat, ACK with the lock token), every request and reply decoded
and as an annotated hex dump.

Design: the script is data, ``session.yaml`` beside this module (requests, the values saved
from replies, why each step is there). At build time each request is checked against the
profile's request schema (:class:`~queuewire.codecs.validation.BunqueueValidator`), encoded
by the codec, decoded as the server decodes a frame, and answered by the reference server's
request path: a :class:`~queuewire.reference_server.bunqueue.BunqueueServer` that never
listens (its auth gate and engine, sans-IO, the engine's clock fixed by the script), whose
reply is encoded by the server's own encoder (msgpackr's wide integers, BQ-MSGPACK-8) with
the envelope's echoed fields copied from the request as the TCP shell does (BQ-ENV-2). So
the bytes on the page are those of a real exchange; the job id and the lock token are drawn
at random by the server and change from one build to the next. A request that breaks its
schema, a reply that is not a valid success, or a step that would wait (a long poll) stops
the build with a :class:`SessionError` naming the step and the rule.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

from ..codecs.bunqueue import FrameDecoder, FrameEncoder
from ..codecs.validation import BunqueueValidator, jsonable
from ..reference_server.bunqueue import BunqueueEngine, BunqueueServer, Wait
from . import hexdump
from .text import code, esc, json_block, ref, table, target

SCRIPT = "session.yaml"
VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class SessionError(ValueError):
    """The session script does not run: the message names the step and the rule."""


@dataclass
class _Connection:
    """What the request gate reads and writes of a connection (``GateConnection``)."""

    id: str
    authenticated: bool = False
    rate: Any = None
    decoder: Any = None


@dataclass(frozen=True)
class Exchange:
    """One step: the request and reply as the wire carried them, and as they decode."""

    cmd: str
    doc: str
    request: Any
    request_bytes: bytes
    reply: Any
    reply_bytes: bytes


def load_script() -> dict[str, Any]:
    text = resources.files(__package__).joinpath(SCRIPT).read_text(encoding="utf-8")
    script = yaml.safe_load(text)
    for key in ("auth_token", "clock", "steps"):
        if key not in script:
            raise SessionError(f"{SCRIPT}: no `{key}`")
    return script


def fill(value: Any, env: dict[str, Any], where: str) -> Any:
    """``value`` with each ``${name}`` replaced (a whole-string one keeps the value's type)."""
    if isinstance(value, dict):
        return {k: fill(v, env, where) for k, v in value.items()}
    if isinstance(value, list):
        return [fill(v, env, where) for v in value]
    if not isinstance(value, str):
        return value
    for name in VAR.findall(value):
        if name not in env:
            raise SessionError(f"{where}: `${{{name}}}` is no value saved before this step "
                               f"(known: {', '.join(sorted(env))})")
    whole = VAR.fullmatch(value)
    if whole:
        return env[whole.group(1)]
    return VAR.sub(lambda m: str(env[m.group(1)]), value)


def run(profile: Any) -> list[Exchange]:
    """Play the script against the reference server's request path (see the module doc)."""
    script = load_script()
    clock = float(script["clock"])
    server = BunqueueServer(profile, port=0, auth_tokens=(str(script["auth_token"]),),
                            engine=BunqueueEngine(profile, now_ms=lambda: clock))
    envelope = profile.tree["envelope"]
    echoed = [k for k in envelope["reply"] if k in envelope["request"]]  # reqId (BQ-ENV-2)
    validator = BunqueueValidator(profile)
    client, decoder = FrameEncoder(profile), FrameDecoder(profile)
    conn = _Connection("docs-session", decoder=FrameDecoder(
        profile, max_frame_bytes=server.pre_auth_frame_bytes))
    server.engine.connection_opened(conn.id)
    env: dict[str, Any] = {"auth_token": str(script["auth_token"]),
                           "protocol_version": profile.model.protocol_version}
    out = []
    for i, step in enumerate(script["steps"], 1):
        where = f"{SCRIPT} step {i}"
        request = fill(step["send"], env, where)
        cmd = request.get("cmd")
        where += f" ({cmd})"
        broken = validator.request_violations(request)
        if broken:
            raise SessionError(f"{where}: the request breaks {broken[0]}")
        request_bytes = client.encode(request)
        (received,) = conn.decoder.feed(request_bytes)
        answer = server.gate.answer(conn, received)
        if isinstance(answer, Wait):
            raise SessionError(f"{where}: the server would wait (a long poll): a session "
                               "step must be answered at once")
        reply = dict(answer)
        reply.update({k: received[k] for k in echoed if k in received})
        reply_bytes = server.encoder.encode(reply)
        (sent,) = decoder.feed(reply_bytes)
        broken = validator.reply_violations(cmd, sent)
        if sent.get("ok") is not True or broken:
            raise SessionError(f"{where}: the reference server answered {sent!r}"
                               + (f", which breaks {broken[0]}" if broken else ""))
        for name, key in (step.get("save") or {}).items():
            if key not in sent:
                raise SessionError(f"{where}: cannot save `{name}`: the reply has no `{key}`")
            env[name] = sent[key]
        out.append(Exchange(cmd, str(step.get("doc", "")), received, request_bytes, sent,
                            reply_bytes))
    return out


def _dump(profile: Any, value: Any, data: bytes, role: str, caption: str) -> list[str]:
    shown = jsonable(value)
    groups = hexdump.bunqueue_groups(profile.model, data)
    return (json_block(shown) + hexdump.render(data, groups, protocol="bunqueue",
                                              profile=profile.name, role=role, value=shown,
                                              caption=caption))


def session_page(profile: Any) -> list[str]:
    """The page's Markdown lines."""
    script = load_script()
    exchanges = run(profile)
    when = dt.datetime.fromtimestamp(float(script["clock"]) / 1000, dt.UTC)
    commands = profile.model.commands
    lines = [target(profile.name, "page", "session"), f"# {profile.name}: a typical session", "",
             "One worker's connection, from Auth to the ACK of the job it pushed and pulled. "
             "The requests are encoded by queuewire's codec; the replies come from queuewire's "
             "reference server, its request path (authentication gate and engine) run without "
             "a socket when these docs were built, so every byte below is one a real exchange "
             "carries. The server was given the auth token "
             f"{code(script['auth_token'])} and its clock read {when.isoformat()}; the job id "
             "and the lock token are drawn at random by the server, so they change from one "
             "build to the next.", ""]
    lines += table(["step", "command", "what it does"],
                   [[str(i), ref(profile.name, "cmd", x.cmd), esc(commands[x.cmd].doc)]
                    for i, x in enumerate(exchanges, 1)])
    for i, x in enumerate(exchanges, 1):
        lines += [f"## {i}. {x.cmd}", "", esc(x.doc), "",
                  f"{ref(profile.name, 'cmd', x.cmd)}: {esc(commands[x.cmd].doc)}", "",
                  "**Request**", ""]
        lines += _dump(profile, x.request, x.request_bytes, "daemon", f"step {i} {x.cmd} request")
        lines += ["**Reply**", ""]
        lines += _dump(profile, x.reply, x.reply_bytes, "client", f"step {i} {x.cmd} reply")
    return lines
