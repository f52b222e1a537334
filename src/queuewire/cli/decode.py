"""``queuewire decode``: one direction of a connection, one JSON line per frame, with
verdicts citing requirement ids."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from ..spec import default_profile
from ._common import PROTOCOLS, load, profile_option


def _display(value: Any) -> Any:
    """A decoded value as JSON for display: undefined, binary and timestamps made explicit."""
    from ..codecs.validation import jsonable

    return jsonable(value)


def _read_input(path: str, hex_input: bool) -> bytes:
    try:
        with click.open_file(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise click.UsageError(f"cannot read {path}: {exc.strerror}") from None
    if hex_input:
        text = data.decode("ascii", "replace")
        cleaned = "".join(text.split())
        try:
            return bytes.fromhex(cleaned)
        except ValueError as exc:
            raise click.UsageError(f"--hex input is not hexadecimal: {exc}") from None
    return data


@click.command()
@click.option("--protocol", type=click.Choice(PROTOCOLS), required=True)
@profile_option()
@click.option("--hex", "hex_input", is_flag=True, help="Input is hex text (whitespace ignored).")
@click.option("--chunk", type=int, default=65536, show_default=True,
              help="Feed the decoder this many bytes at a time.")
@click.option("--command", "reply_to", metavar="CMD",
              help="bunqueue: validate replies as replies to CMD.")
@click.option("--role", type=click.Choice(["daemon", "producer", "worker", "monitor"]),
              default="daemon", show_default=True,
              help="quicx: the side receiving the bytes (daemon for client-to-daemon traffic, "
                   "a client role for daemon-to-client traffic).")
@click.argument("file", default="-")
def decode(protocol: str, profile: str | None, hex_input: bool, chunk: int, reply_to: str | None,
           role: str, file: str) -> None:
    """Decode one direction of a connection from FILE (or - for stdin).

    Prints one JSON line per frame: offset, length, the decoded message and the verdicts
    (each a requirement id, level, JSON path and message). A framing error (the stream cannot
    be trusted past it) prints an error line and exits 1; a bad payload inside an intact
    frame is reported and decoding goes on.
    """
    prof = load(profile or default_profile(protocol))
    if prof.protocol != protocol:
        raise click.UsageError(f"profile {prof.name} is a {prof.protocol} profile, not {protocol}")
    data = _read_input(file, hex_input)
    if chunk < 1:
        raise click.UsageError("--chunk must be at least 1")
    if protocol == "bunqueue":
        code = _decode_bunqueue(prof, data, chunk, reply_to)
    else:
        code = _decode_quicx(prof, data, chunk, role)
    sys.exit(code)


def _emit(record: dict) -> None:
    click.echo(json.dumps(record, ensure_ascii=False))


def _drive(feed: Any, eof: Any, describe: Any, data: bytes, chunk: int) -> int:
    """Feed ``data`` to a sans-IO decoder ``chunk`` bytes at a time and print one JSON line
    per frame (``describe(frame)``) or error. A ``reply`` error consumed only its frame, so
    decoding goes on; a ``close`` error, or a stream ending inside a frame, ends with 1."""
    from ..codecs.errors import ProtocolError

    index = 0

    def frames(items: list) -> None:
        nonlocal index
        for item in items:
            _emit({"frame": index, **describe(item)})
            index += 1

    def error(exc: ProtocolError) -> None:
        nonlocal index
        _emit({"frame": index, "offset": exc.offset, "error": exc.as_dict()})
        index += 1

    pos, pending = 0, data[:chunk]
    while True:
        try:
            frames(feed(pending))
        except ProtocolError as exc:
            frames(exc.frames)
            error(exc)
            if exc.reaction == "close":
                return 1
            pending = b""
            continue
        pos += chunk
        if pos >= len(data):
            break
        pending = data[pos:pos + chunk]
    try:
        eof()
    except ProtocolError as exc:
        error(exc)
        return 1
    return 0


def _decode_bunqueue(prof: Any, data: bytes, chunk: int, reply_to: str | None) -> int:
    from ..codecs.bunqueue import FrameDecoder
    from ..codecs.validation import BunqueueValidator

    decoder = FrameDecoder(prof)
    validator = BunqueueValidator(prof)

    def describe(frame: Any) -> dict:
        msg = frame.value
        if "cmd" in msg or (reply_to is None and "ok" not in msg):
            kind, violations = "request", validator.request_violations(msg)
            extra = validator.extra_fields(str(msg.get("cmd")), msg)
        elif reply_to:
            kind, violations = "reply", validator.reply_violations(reply_to, msg)
            extra = validator.extra_fields(reply_to, msg, reply=True)
        else:  # a reply of unknown command: only the shared error-reply shape can be checked
            kind, extra = "reply", []
            violations = () if msg.get("ok") is True else validator.reply_violations("", msg)
        return {"offset": frame.offset, "length": frame.length, "kind": kind,
                "message": _display(msg), "verdicts": [v.as_dict() for v in violations],
                "extra_fields": extra}

    return _drive(decoder.feed_frames, decoder.eof, describe, data, chunk)


def _decode_quicx(prof: Any, data: bytes, chunk: int, role: str) -> int:
    from ..codecs.quicx import QuicxDecoder

    decoder = QuicxDecoder(prof, role)

    def describe(message: Any) -> dict:
        return {"offset": message.offset, "length": len(message.raw), **message.as_dict()}

    return _drive(decoder.feed, decoder.eof, describe, data, chunk)
