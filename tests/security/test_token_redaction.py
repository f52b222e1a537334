"""The auth token never reaches a file the conformance runner writes (issue 22, item 6).

``conform server --auth-token T`` used to write T into report.html, report.json, junit.xml
and the case files, decoded and in hex. A reference bunqueue server runs as a process with
that token (``queuewire serve bunqueue --auth-tokens T``), the runner runs as a process
against it with cases that end INFO (so case files are written), and every byte of every file
it wrote is searched for the token, its hex and its base64 (and the all-but-last-character
near miss the Auth timing case sends). The token must still be usable from
``QUEUEWIRE_AUTH_TOKEN``: the case files replay with it, raw bytes included.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys

from serve_process import start_serve, stop_serve

TOKEN = "SECRET-qw-token-7d1f2a9c"
SELECT = ("bunqueue.auth.*", "bunqueue.rate.*")  # auth cases judged; timing and rate end INFO
GUARD = 60.0


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "queuewire.cli", *args], capture_output=True,
                          text=True, timeout=GUARD, check=False, env={**os.environ, **(env or {})})


def _forbidden(token: str) -> dict[str, bytes]:
    raw = token.encode()
    out = {"token": raw, "hex": raw.hex().encode(), "HEX": raw.hex().upper().encode(),
           "base64": base64.b64encode(raw).rstrip(b"="),
           "near miss": raw[:-1]}  # bunqueue.auth.timing sends the token minus its last char
    for shift in (1, 2):  # base64 of the token at any alignment inside a longer string
        out[f"base64+{shift}"] = base64.b64encode(b"\0" * shift + raw)[4:-4]
    return out


def test_token_is_in_no_file_written_and_still_replays(tmp_path):
    """Item 6 done-when: no trace of the token (plain, hex, base64) in any file under the
    report dir or in --html/--json/--junit; the run did authenticate with it; the token is
    taken from QUEUEWIRE_AUTH_TOKEN by `conform replay` (judged and --raw)."""
    proc, port = start_serve("bunqueue", "--auth-tokens", TOKEN)
    try:
        out = tmp_path / "out"
        args = ["conform", "server", "--protocol", "bunqueue", "--target", f"127.0.0.1:{port}",
                "--auth-token", TOKEN, "--report-dir", str(out), "--html", str(out / "x.html"),
                "--json", str(out / "x.json"), "--junit", str(out / "x.xml"), "--timeout", "2"]
        for glob in SELECT:
            args += ["--select", glob]
        run = _cli(*args)
        assert run.returncode == 0, run.stdout + run.stderr
        doc = json.loads((out / "report.json").read_text())
        verdicts = {c["id"]: c["verdict"] for c in doc["runs"][0]["cases"]}
        # the token was used: the cases that need it were judged, not left INFO
        assert verdicts["bunqueue.auth.required"] == "PASS", verdicts
        assert verdicts["bunqueue.auth.invalid-token"] == "PASS", verdicts
        cases = sorted((out / "cases").glob("*.json"))
        assert len(cases) >= 2, verdicts
        files = [p for p in out.rglob("*") if p.is_file()]
        assert len(files) >= 6 + len(cases) - 3
        for path in files:
            data = path.read_bytes()
            for what, needle in _forbidden(TOKEN).items():
                assert needle not in data, f"{path.name} holds the token's {what}"
        for shown in (run.stdout, run.stderr):
            assert TOKEN not in shown and TOKEN[:-1] not in shown

        # the redacted case files replay with the token from the environment
        rate = next(p for p in cases if "rate" in p.name)
        env = {"QUEUEWIRE_AUTH_TOKEN": TOKEN}
        judged = _cli("conform", "replay", str(rate), "--target", f"127.0.0.1:{port}", env=env)
        assert judged.returncode == 0, judged.stdout + judged.stderr
        raw = _cli("conform", "replay", str(rate), "--target", f"127.0.0.1:{port}", "--raw",
                   env=env)
        assert raw.returncode == 0, raw.stdout + raw.stderr
        assert TOKEN not in raw.stdout + raw.stderr
        # without the token the raw replay says what is missing (and its Auth is refused)
        bare = _cli("conform", "replay", str(rate), "--target", f"127.0.0.1:{port}", "--raw",
                    env={"QUEUEWIRE_AUTH_TOKEN": ""})
        assert "QUEUEWIRE_AUTH_TOKEN" in bare.stderr, bare.stdout + bare.stderr
    finally:
        stop_serve(proc)


def test_redaction_keeps_frames_replayable_in_place():
    """Item 6: the bytes of a frame holding the token are redacted by a same-length marker,
    and the recorded spans put the token back exactly (the frame decodes again)."""
    from queuewire.codecs.bunqueue import FrameDecoder, FrameEncoder
    from queuewire.conformance.model import Transcript, redact_transcript

    frame = FrameEncoder("bunqueue/v2").encode({"cmd": "Auth", "token": TOKEN, "reqId": "a1"})
    near = FrameEncoder("bunqueue/v2").encode({"cmd": "Auth", "token": TOKEN[:-1] + "#"})
    t = Transcript()
    t.add(1, "send", frame, {"cmd": "Auth", "token": TOKEN, "reqId": "a1"})
    t.add(1, "send", near, {"cmd": "Auth", "token": TOKEN[:-1] + "#"}, f"note {TOKEN}")
    redact_transcript(t, TOKEN)
    first, second = t.events
    assert len(first.data) == len(frame) and TOKEN.encode() not in first.data
    assert TOKEN not in json.dumps(first.decoded) and TOKEN not in second.note
    assert TOKEN[:-1].encode() not in second.data and TOKEN[:-1] not in json.dumps(second.decoded)
    from queuewire.conformance.replay import restore_token

    assert restore_token(first.data, first.redacted, TOKEN) == frame
    assert restore_token(second.data, second.redacted, TOKEN) == near
    assert FrameDecoder("bunqueue/v2").feed(first.data)[0]["token"] != TOKEN
