"""A deliberately minimal bunqueue testee: the raw-socket client of
docs/conformance/client-testee.md ("A minimal testee"), grown just enough to play a worker.

It is correct where it acts and does the least a client can: one connection per request,
every command sent only once the reply to the one before came (no pipelining: ``add_many``
adds one job after another), no heartbeats, no reconnect (a lost connection fails every later
action with ``connection_lost``), no dead-link detection (a timed-out command leaves the
connection as it was), no event subscription. It sends Hello first, Auth when given a token,
and ACKs each job it pulled with the job's lock token. Actions: add, add_many, count, process
(PULL with an owner, ``work_ms`` of work, ACK; a refused ACK ends the action), sleep.

The capability table of ``queuewire conform client`` must say "not used" for what it leaves
out wherever a scenario gives it the chance (tests/conformance/test_client_capabilities.py).
"""

from __future__ import annotations

import json
import socket
import sys
import time
from typing import Any

from queuewire.codecs.bunqueue import FrameDecoder, encode_frame
from queuewire.spec import load_profile


class Lost(Exception):
    """The connection is gone."""


class Refused(Exception):
    """The server answered ok: false."""


class Link:
    def __init__(self, target: str, timeout: float):
        host, _, port = target.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.decoder = FrameDecoder()
        self.n = 0
        self.lost = False

    def call(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Send ``msg`` with the next reqId and wait for the reply carrying it."""
        if self.lost:
            raise Lost("connection lost earlier")
        self.n += 1
        req_id = str(self.n)
        try:
            self.sock.sendall(encode_frame({**msg, "reqId": req_id}))
            while True:
                data = self.sock.recv(65536)
                if not data:
                    self.lost = True
                    raise Lost("the server closed the connection")
                for reply in self.decoder.feed(data):
                    if isinstance(reply, dict) and reply.get("reqId") == req_id:
                        if reply.get("ok") is False:
                            raise Refused(str(reply.get("error")))
                        return reply
        except (ConnectionError, BrokenPipeError) as exc:
            self.lost = True
            raise Lost(str(exc)) from exc


def process(link: Link, action: dict[str, Any]) -> dict[str, Any]:
    deadline = time.monotonic() + float(action.get("timeout_ms", 10000)) / 1000.0
    ids: list[Any] = []
    while len(ids) < int(action["count"]):
        if time.monotonic() > deadline:
            raise TimeoutError(f"processed {len(ids)} of {action['count']} in time")
        reply = link.call({"cmd": "PULL", "queue": action["queue"], "owner": "minimal",
                           "timeout": 200})
        job = reply.get("job")
        if not isinstance(job, dict):
            continue
        time.sleep(float(action.get("work_ms", 0)) / 1000.0)
        link.call({"cmd": "ACK", "id": job["id"], "token": reply.get("token"),
                   "result": {"done": True}})
        ids.append(job["id"])
    return {"ids": ids}


def act(link: Link, action: dict[str, Any]) -> Any:
    op = action["op"]
    if op == "add":
        return {"id": link.call({"cmd": "PUSH", "queue": action["queue"],
                                 "data": action["data"]})["id"]}
    if op == "add_many":   # one after another: this client does not pipeline
        return {"ids": [link.call({"cmd": "PUSH", "queue": action["queue"], "data": d})["id"]
                        for d in action["items"]]}
    if op == "count":
        return link.call({"cmd": "Count", "queue": action["queue"]})["count"]
    if op == "process":
        return process(link, action)
    if op == "sleep":
        time.sleep(float(action["ms"]) / 1000.0)
        return None
    raise NotImplementedError(op)


def outcome(link: Link, action: dict[str, Any]) -> dict[str, Any]:
    try:
        return {"ok": True, "value": act(link, action)}
    except NotImplementedError as exc:
        return {"ok": False, "error": f"no {exc}", "error_type": "unsupported"}
    except TimeoutError as exc:
        return {"ok": False, "error": str(exc) or "timeout", "error_type": "timeout"}
    except Lost as exc:
        return {"ok": False, "error": str(exc), "error_type": "connection_lost"}
    except Refused as exc:
        return {"ok": False, "error": str(exc), "error_type": "refused"}


def play(request: dict[str, Any]) -> list[dict[str, Any]]:
    options = request.get("options") or {}
    link = Link(request["target"], float(options.get("command_timeout", 5000)) / 1000.0)
    try:
        version = load_profile(request["profile"]).model.protocol_version
        opening = [{"cmd": "Hello", "protocolVersion": version}]
        if options.get("token"):
            opening.append({"cmd": "Auth", "token": options["token"]})
        for msg in opening:   # a failure here shows in the actions' own results
            try:
                link.call(msg)
            except (TimeoutError, Refused, Lost):
                pass
        return [outcome(link, a) for a in request["actions"]]
    finally:
        link.sock.close()


def main() -> None:
    for line in sys.stdin:
        request = json.loads(line)
        try:
            results = play(request)
        except (OSError, Lost, Refused) as exc:
            results = [{"ok": False, "error": f"cannot start: {exc}", "error_type": "other"}
                       for _ in request["actions"]]
        print(json.dumps({"scenario": request["scenario"], "results": results}), flush=True)


if __name__ == "__main__":
    main()
