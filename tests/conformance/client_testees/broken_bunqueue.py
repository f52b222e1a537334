"""A deliberately broken bunqueue testee: a raw socket script behind the testee contract.

Usage: ``python broken_bunqueue.py MODE`` with MODE one of

* ``no-auth``: sends Hello, then Count without Auth even when given a token (BQ-AUTH-1);
* ``dup-reqid``: sends Hello, then two PUSH frames pipelined with the same reqId (BQ-PIPE-4);
* ``ack-no-token``: pushes a job, pulls it with an owner, ACKs it without its token (BQ-LOCK-2);
* ``exit``: exits on its first request (the scenario is an ERROR).

Every action is reported failed (``error_type: other``): what is judged is on the wire.
"""

from __future__ import annotations

import json
import socket
import sys

from queuewire.codecs.bunqueue import FrameDecoder, encode_frame


def exchange(sock: socket.socket, decoder: FrameDecoder, frames: list[dict], want: int) -> list:
    sock.sendall(b"".join(encode_frame(f) for f in frames))
    got: list = []
    while len(got) < want:
        data = sock.recv(65536)
        if not data:
            break
        got += decoder.feed(data)
    return got


def play(mode: str, request: dict) -> None:
    host, _, port = request["target"].rpartition(":")
    queue = next((a.get("queue") for a in request["actions"] if a.get("queue")), "broken")
    with socket.create_connection((host, int(port)), timeout=3) as sock:
        decoder = FrameDecoder()
        exchange(sock, decoder, [{"cmd": "Hello", "protocolVersion": 2, "reqId": "1"}], 1)
        if mode == "no-auth":
            exchange(sock, decoder, [{"cmd": "Count", "queue": queue, "reqId": "2"}], 1)
        elif mode == "dup-reqid":
            push = {"cmd": "PUSH", "queue": queue, "data": {"n": 1}, "reqId": "7"}
            exchange(sock, decoder, [push, {**push, "data": {"n": 2}}], 2)
        elif mode == "ack-no-token":
            exchange(sock, decoder, [{"cmd": "PUSH", "queue": queue, "data": {"n": 1},
                                      "reqId": "2"}], 1)
            pulled = exchange(sock, decoder, [{"cmd": "PULL", "queue": queue, "owner": "broken",
                                               "reqId": "3"}], 1)
            job = (pulled[0].get("job") or {}) if pulled else {}
            exchange(sock, decoder, [{"cmd": "ACK", "id": job.get("id", "0"), "reqId": "4"}], 1)


def main() -> None:
    mode = sys.argv[1]
    for line in sys.stdin:
        request = json.loads(line)
        if mode == "exit":
            sys.exit(3)
        try:
            play(mode, request)
        except OSError as exc:
            print(f"socket error: {exc}", file=sys.stderr, flush=True)
        results = [{"ok": False, "error": "broken testee", "error_type": "other"}
                   for _ in request["actions"]]
        print(json.dumps({"scenario": request["scenario"], "results": results}), flush=True)


if __name__ == "__main__":
    main()
