"""A deliberately broken quicx producer behind the testee contract (for the client fuzzer's
tests): a raw socket client that trusts every frame.

Usage: ``python broken_quicx_testee.py MODE``; ``submit`` sends MSG_SUBMIT and reads one frame
as its MSG_OK; ``work`` sends MSG_READY and answers MSG_DONE to every frame of MSG_TASK's type
by the id in its first four bytes, whatever the rest says (MSG_WAIT: READY again). On any
frame it cannot take at face value (not a MSG_OK of the profile's shape, a closed connection,
nothing within 2 s) MODE ``crash`` lets the exception end the process, MODE ``hang`` stops
answering (it exits only when its stdin closes) and MODE ``trusting`` reports a typed error.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import sys
import threading
import time

from queuewire.codecs.quicx import encode
from queuewire.spec import load_profile


def read_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def play(request: dict) -> list:
    profile = load_profile(request.get("profile") or "quicx/v1")
    ok_code = profile.model.message("MSG_OK").code
    host, _, port = request["target"].rpartition(":")
    results = []
    with socket.create_connection((host, int(port)), timeout=2) as sock:
        for action in request["actions"]:
            if action["op"] == "work":
                results.append(work(profile, (host, int(port)), action))
                continue
            if action["op"] != "submit":
                results.append({"ok": False, "error": action["op"], "error_type": "unsupported"})
                continue
            sock.sendall(encode(profile, "MSG_SUBMIT", task_type=action["type"],
                                payload=str(action.get("payload", "")).encode()))
            version, code, length = struct.unpack(">BBL", read_exactly(sock, 6))
            body = read_exactly(sock, length)
            if code != ok_code or length != 4:
                raise ValueError(f"not a MSG_OK: type {code}, {length} bytes")
            results.append({"ok": True, "value": {"id": int.from_bytes(body, "big"),
                                                  "status": "accepted"}})
    return results


def work(profile, address: tuple[str, int], action: dict) -> dict:
    codes = {name: profile.model.message(name).code for name in ("MSG_TASK", "MSG_WAIT")}
    ids = []
    with socket.create_connection(address, timeout=2) as sock:
        sock.sendall(encode(profile, "MSG_READY"))
        while len(ids) < action["count"]:
            _version, code, length = struct.unpack(">BBL", read_exactly(sock, 6))
            body = read_exactly(sock, length)
            if code == codes["MSG_WAIT"]:
                time.sleep(0.05)
            elif code == codes["MSG_TASK"]:
                task_id = int.from_bytes(body[:4], "big")
                sock.sendall(encode(profile, "MSG_DONE", task_id=task_id))
                ids.append(task_id)
            sock.sendall(encode(profile, "MSG_READY"))
    return {"ok": True, "value": {"ids": ids}}


def main(mode: str) -> None:
    for line in sys.stdin:
        request = json.loads(line)
        try:
            results = play(request)
        except Exception as exc:
            if mode == "trusting":
                results = [{"ok": False, "error": repr(exc), "error_type": "other"}
                           for _ in request["actions"]]
                print(json.dumps({"scenario": request["scenario"], "results": results}),
                      flush=True)
                continue
            if mode == "crash":
                raise
            threading.Thread(target=lambda: (sys.stdin.read(), os._exit(3)),
                             daemon=True).start()
            while True:
                time.sleep(3600)
        print(json.dumps({"scenario": request["scenario"], "results": results}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
