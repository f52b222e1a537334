"""Every hex example of the generated docs is decoded by the codecs, compared with the value
the page shows, and encoded back to the same bytes; and its annotation covers every byte,
field by field, in order. The docs cannot drift from the code."""

from __future__ import annotations

import html
import json
import re

from queuewire.codecs.bunqueue import FrameDecoder, FrameEncoder
from queuewire.codecs.quicx import QuicxEncoder, decode
from queuewire.spec import load_profile, profile_names
from queuewire.vectors import from_json
from queuewire.vectors.bunqueue import to_json

DUMP = re.compile(r'<div class="qw-hexdump" ([^>]*)>\n(.*?)\n</div>', re.S)
ATTR = re.compile(r'data-([a-z]+)="([^"]*)"')
ROW = re.compile(r'<tr class="qw-c\d" data-start="(\d+)" data-end="(\d+)">')


def _dumps(generated):
    for path, text in generated.items():
        for attrs, body in DUMP.findall(text):
            yield path, {k: html.unescape(v) for k, v in ATTR.findall(attrs)}, body


def test_every_hex_example_round_trips_through_the_codecs(generated):
    seen = {name: 0 for name in profile_names()}
    problems = []
    for path, attrs, body in _dumps(generated):
        data = bytes.fromhex(attrs["hex"])
        name = attrs["profile"]
        value = json.loads(attrs["value"])
        seen[name] += 1
        where = f"{path} ({name}, {data[:12].hex()}…)"
        if attrs["protocol"] == "bunqueue":
            frames = FrameDecoder(name).feed(data)
            if len(frames) != 1 or to_json(frames[0]) != value:
                problems.append(f"{where}: decodes to {frames!r}, the page shows {value!r}")
            elif FrameEncoder(name).encode(from_json(value)) != data:
                problems.append(f"{where}: the decoded value does not encode to the same bytes")
        else:
            (msg,) = decode(name, data, attrs["role"])
            if msg.as_dict() != value:
                problems.append(f"{where}: decodes to {msg.as_dict()}, the page shows {value}")
            elif QuicxEncoder(name).encode(msg.name, **msg.fields) != data:
                problems.append(f"{where}: the decoded fields do not encode to the same bytes")
        spans = [(int(a), int(b)) for a, b in ROW.findall(body)]
        covered = 0
        for start, end in spans:
            if start != covered or end <= start:
                problems.append(f"{where}: annotation has a gap or overlap at byte {start}")
                break
            covered = end
        if covered != len(data):
            problems.append(f"{where}: annotation covers {covered} of {len(data)} bytes")
    assert not problems, "\n".join(problems[:20])
    for name, count in seen.items():
        profile = load_profile(name)
        least = (2 * len(profile.model.commands) if profile.protocol == "bunqueue"
                 else sum(not m.reserved and m.transport == profile.model.transport
                          for m in profile.model.messages.values()))
        assert count >= least, f"{name}: {count} hex examples, expected at least {least}"


def test_quicx_annotation_names_each_field_with_its_decoded_value(generated):
    """The labels are the spec's field names and the values those the codec decodes."""
    for path, attrs, body in _dumps(generated):
        if attrs["protocol"] != "quicx":
            continue
        (msg,) = decode(attrs["profile"], bytes.fromhex(attrs["hex"]), attrs["role"])
        for fid in ("version", "msg_type", "len_payload"):
            assert f"<code>header.{fid}</code>" in body, (path, fid)
        assert f"0x{msg.code:02X} ({msg.name})" in body, path
        for fid, value in msg.fields.items():
            assert f"<code>{fid}</code>" in body, (path, fid)
            if isinstance(value, int):
                assert f"<td>{value} (0x" in body or f"0x{value:02X} (" in body, (path, fid)
