"""``queuewire dissector``: write (or install) a Wireshark Lua dissector generated from the spec."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from ..spec import default_profile
from ._common import PROTOCOLS, err_console, load, profile_option


@click.command()
@click.option("--protocol", type=click.Choice(PROTOCOLS), required=True, help="Protocol to dissect.")
@profile_option()
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the dissector to this file (default: standard output).")
@click.option("--install", is_flag=True,
              help="Write it into your Wireshark plugin folder ($WIRESHARK_PLUGIN_DIR, else "
                   "~/.config/wireshark/plugins) as queuewire-<protocol>.lua, replacing the "
                   "one there; Wireshark and tshark load it at their next start.")
def dissector(protocol: str, profile: str | None, output: Path | None, install: bool) -> None:
    """Generate a Wireshark/tshark dissector (Lua, Wireshark 4.0 or later) from the spec.

    Everything the dissector knows of the protocol comes from the profile, written at the top
    of the file as one SPEC table; the same profile gives the same file. It registers on the
    profile's default TCP port (a preference moves it; "Decode As" works on any port), cuts
    frames across TCP segments, names every field (filters such as bunqueue.cmd == "PUSH",
    bunqueue.reqid, quicx.type == 5, quicx.task_id), links requests to replies and a quicx
    task's frames, and flags framing violations as expert info citing the requirement.

    \b
    Examples:
      queuewire dissector --protocol bunqueue -o bunqueue.lua
      tshark -X lua_script:bunqueue.lua -2 -r capture.pcap -Y 'bunqueue.cmd == "PUSH"'
      queuewire dissector --protocol quicx --profile quicx/1.0.3 --install
    """
    from ..dissector import file_name, generate, plugin_dir

    prof = load(profile or default_profile(protocol))
    if prof.protocol != protocol:
        raise click.UsageError(f"profile {prof.name} is a {prof.protocol} profile, not {protocol}")
    text = generate(prof)
    if install:
        folder = plugin_dir()
        try:
            folder.mkdir(parents=True, exist_ok=True)
            target = folder / file_name(prof)
            target.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise click.ClickException(f"cannot write into {folder}: {exc.strerror or exc}") from None
        err_console.print(f"installed {prof.name}'s dissector as {target}; restart Wireshark "
                          "(or tshark) to load it")
    if output is not None:
        try:
            output.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise click.ClickException(f"cannot write {output}: {exc.strerror or exc}") from None
    elif not install:
        sys.stdout.write(text)
