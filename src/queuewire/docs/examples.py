"""Examples from the test vectors: which vector illustrates which command or message, shown
as its decoded value and as an annotated hex dump.

The vectors are read from ``vectors/`` (the files ``queuewire vectors check`` keeps in step
with the spec); where the directory is absent (an installed package) they are generated in
memory, which gives the same bytes.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from ..codecs.quicx import decode as quicx_decode
from ..vectors import bunqueue_vectors, file_name, vectors_dir
from ..vectors import quicx as quicx_vectors
from . import hexdump
from .text import json_block


@functools.cache
def vectors(protocol: str, profile_name: str) -> tuple[dict, ...]:
    path = vectors_dir() / protocol / file_name(profile_name)
    if path.is_file():
        doc = json.loads(path.read_text(encoding="utf-8"))
        return tuple(doc["vectors"])
    if protocol == "bunqueue":
        return tuple(bunqueue_vectors(profile_name)["vectors"])
    return tuple(quicx_vectors.generate(profile_name))


def bunqueue_example(profile: Any, command: str, direction: str) -> dict | None:
    """The ``bq.cmd.<command>.<direction>`` vector (a valid message with its bytes)."""
    vid = f"bq.cmd.{command}.{direction}"
    return next((v for v in vectors("bunqueue", profile.name) if v["id"] == vid and "hex" in v),
                None)


def quicx_examples(profile: Any, message: str) -> list[tuple[list[str], dict]]:
    """The message's canonical vectors (``quicx/<profile>/<message>/<sender->receiver>``),
    one per distinct frame, each with every direction it was generated for."""
    prefix = f"quicx/{profile.name.split('/', 1)[1]}/{message}/"
    out: dict[str, tuple[list[str], dict]] = {}
    for v in vectors("quicx", profile.name):
        rest = v["id"][len(prefix):] if v["id"].startswith(prefix) else None
        if rest is None or "->" not in rest or "decoded" not in v:
            continue
        out.setdefault(v["hex"], ([], v))[0].append(rest)
    return list(out.values())


def bunqueue_dump(profile: Any, vec: dict, caption: str) -> list[str]:
    data = bytes.fromhex(vec["hex"])
    groups = hexdump.bunqueue_groups(profile.model, data)
    role = "daemon" if vec["direction"] == "request" else "client"
    return (["Decoded:", ""] + json_block(vec["value"]) +
            hexdump.render(data, groups, protocol="bunqueue", profile=profile.name, role=role,
                           value=vec["value"], caption=caption))


def quicx_dump(profile: Any, vec: dict, caption: str) -> list[str]:
    data = bytes.fromhex(vec["hex"])
    (msg,) = quicx_decode(profile, data, vec["role"])  # the vector decodes, or the docs fail
    groups = hexdump.quicx_groups(profile.model, data)
    decoded = msg.as_dict()
    return (["Decoded:", ""] + json_block(decoded) +
            hexdump.render(data, groups, protocol="quicx", profile=profile.name,
                           role=vec["role"], value=decoded, caption=caption))

