"""``queuewire.dissector``: Wireshark dissectors generated from the spec.

What it is
----------
``queuewire dissector --protocol bunqueue|quicx [--profile P]`` writes a Lua dissector for
Wireshark and tshark (4.0 or later, built with Lua). Everything it knows of the protocol is
the profile's data, written at the top of the file as a ``SPEC`` table (ports, the length
prefix, limits, commands, opcodes, payload layouts, and the requirement each expert info
cites); the Lua below it is generic, so a changed spec gives a changed table, never a
hand-edited field. The same profile gives the same file byte for byte.

Rooms
-----
:mod:`.lua` writes Python values as Lua literals; :mod:`.bunqueue` and :mod:`.quicx` each
build one protocol's table and hold its Lua; this module picks one by the profile's protocol
(:func:`generate`) and knows where Wireshark looks for plugins (:func:`plugin_dir`).
"""

from __future__ import annotations

import os
from pathlib import Path

from ..spec import Profile
from . import bunqueue, quicx

__all__ = ["file_name", "generate", "plugin_dir"]


def generate(profile: Profile) -> str:
    """The Lua dissector of ``profile``."""
    if profile.protocol == "bunqueue":
        return bunqueue.generate(profile)
    if profile.protocol == "quicx":
        return quicx.generate(profile)
    raise ValueError(f"no dissector for protocol {profile.protocol!r}")


def file_name(profile: Profile) -> str:
    """``queuewire-bunqueue.lua``: one file per protocol, so installing another profile's
    dissector replaces the first (Wireshark would refuse two protocols of one name)."""
    return f"queuewire-{profile.protocol}.lua"


def plugin_dir() -> Path:
    """The user's personal Lua plugin folder: ``$WIRESHARK_PLUGIN_DIR`` when set (Wireshark
    reads it too), else ``$XDG_CONFIG_HOME/wireshark/plugins`` (``~/.config/wireshark/
    plugins``), where Wireshark 4 on Linux and macOS loads personal Lua plugins from."""
    env = os.environ.get("WIRESHARK_PLUGIN_DIR")
    if env:
        return Path(env)
    config = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(config) / "wireshark" / "plugins"
