"""A deliberately broken bunqueue client behind the testee contract (for the client fuzzer's
tests): a raw socket client that trusts every reply.

Usage: ``python broken_client_testee.py MODE``; on any reply it cannot take at face value (an
undecodable frame, a reply whose ``ok`` is not a boolean or lacks the field the action reads,
a closed connection, no reply within 2 s) MODE ``crash`` lets the exception end the process,
and MODE ``hang`` stops answering (it exits only when its stdin closes).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time

from queuewire.codecs.bunqueue import FrameDecoder, encode_frame

FIELDS = {"add": "id", "count": "count"}


def call(sock: socket.socket, decoder: FrameDecoder, msg: dict) -> dict:
    sock.sendall(encode_frame(msg))
    while True:
        data = sock.recv(65536)
        if not data:
            raise ConnectionError("closed")
        for reply in decoder.feed(data):
            if reply.get("reqId") == msg["reqId"]:
                return reply


def play(request: dict) -> list:
    host, _, port = request["target"].rpartition(":")
    results = []
    with socket.create_connection((host, int(port)), timeout=2) as sock:
        decoder = FrameDecoder()
        call(sock, decoder, {"cmd": "Hello", "protocolVersion": 2, "reqId": "0"})
        for n, action in enumerate(request["actions"], 1):
            cmd = {"add": {"cmd": "PUSH", "data": action.get("data")},
                   "count": {"cmd": "Count"}}[action["op"]]
            reply = call(sock, decoder, {**cmd, "queue": action["queue"], "reqId": str(n)})
            if type(reply["ok"]) is not bool:
                raise TypeError("ok is not a boolean")
            value = reply[FIELDS[action["op"]]]
            results.append({"ok": True, "value": {"id": value} if action["op"] == "add"
                            else value})
    return results


def main(mode: str) -> None:
    for line in sys.stdin:
        request = json.loads(line)
        try:
            results = play(request)
        except Exception:
            if mode == "crash":
                raise
            threading.Thread(target=lambda: (sys.stdin.read(), os._exit(3)),
                             daemon=True).start()
            while True:
                time.sleep(3600)
        print(json.dumps({"scenario": request["scenario"], "results": results}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
