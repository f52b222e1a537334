"""The ``queuewire`` command line: a thin click shell over the spec, codecs, vectors, reference
servers and conformance suite.

Design: the package is the top layer (nothing in queuewire imports it) and holds no protocol
logic; each command group is one module that only parses options, calls the layer below and
prints: ``spec`` (list, show, lint, export), ``decode``, ``serve`` (quicx, bunqueue),
``conform`` (server, replay, detect, client), ``vectors`` (generate, check), ``tap``,
``fuzz`` (a campaign, ``replay``), ``trace`` (record, import-pcap, analyze) and
``dissector`` (a Wireshark dissector from the spec) and ``learn`` (a server's state
machine, learned and compared with the spec's). A
group module defines its click group on its own and never imports this ``__init__``, which
creates the root group :func:`main` (the console script ``queuewire.cli:main``) and attaches
the groups; ``_common`` holds what they share (the consoles, ``--profile``, loading a profile
as a usage error). Heavy imports (codecs, servers, the runner) stay inside the command
functions so that ``queuewire --help`` is fast. Every command takes ``--profile`` where a
profile matters. Output meant for people is drawn with rich; output meant for programs
(``decode``, ``spec export``) is JSON on stdout. Errors in the user's input (an unknown
profile, unreadable file, malformed hex) end with a one-line message and exit status 2, never
a traceback; protocol errors in decoded bytes are reported as data, with their requirement
ids, and a framing error makes ``decode`` exit 1.
"""

from __future__ import annotations

import click

from . import conform, decode, dissector, fuzz, learn, serve, spec, tap, trace, vectors


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="queuewire")
def main() -> None:
    """queuewire: spec, codecs and conformance tools for the bunqueue and quicx protocols.

    The spec in spec/ is the single source of truth; every command here reads it.
    """


for _command in (spec.spec, decode.decode, serve.serve, conform.conform, vectors.vectors, tap.tap,
                 fuzz.fuzz, trace.trace, dissector.dissector, learn.learn):
    main.add_command(_command)

__all__ = ["main"]
