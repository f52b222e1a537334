"""The channel from the tap's forwarding process to its analyzing process: one Unix stream
socket, records of ``HEADER`` (kind, connection id, time in ns, payload length) and payload.

Kinds: ``DATA_C2S``/``DATA_S2C`` (the bytes, stamped as they are forwarded), ``EOF_C2S``/
``EOF_S2C`` (a half-close passed on), ``OPEN`` (``client\\nupstream``), ``REFUSED``
(``client\\nupstream\\nerror``), ``CLOSE`` (the reason: ``eof``, ``reset``, ``closed``) and
``QUIET`` (no traffic for ``QUIET_S``: the analyzer's moment to analyse) and ``BUSY``
(traffic again, after a quiet moment: analysis waits; sent once per busy period). While traffic
flows the forwarder holds records and writes them in one piece once ``HOLD_BYTES`` wait or
the oldest waited ``HOLD_NS`` (``hold_bytes`` 0, with ``--analysis-lag 0``: within
``QUIET_S``), so the analyzing process is not woken for every read. Past ``CHANNEL_LIMIT``
bytes not yet written (the analyzer stopped reading: it is ``max_backlog`` behind) the
forwarder stops reading its sockets. The analyzer ends the forwarder by half-closing its end.
"""

from __future__ import annotations

import struct

HEADER = struct.Struct("<BIqI")
DATA_C2S, DATA_S2C, EOF_C2S, EOF_S2C, OPEN, REFUSED, CLOSE, QUIET, BUSY = range(9)
#: The most one read takes, and so the most a direction keeps while its peer is slow.
CHUNK = 64 * 1024
#: Bytes waiting to be written to the channel beyond which no socket is read.
CHANNEL_LIMIT = 4 * 1024 * 1024
HOLD_BYTES = 1024 * 1024
HOLD_NS = 100_000_000
#: A gap this long with nothing forwarded is a quiet moment. Longer than a server's time to
#: answer a burst of pipelined requests (about 2 ms for 100 PUSHes on the reference server),
#: so a busy exchange is not analysed between its bursts, on the cores its peers need.
QUIET_S = 0.005
