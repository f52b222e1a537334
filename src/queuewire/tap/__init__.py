"""``queuewire.tap``: a transparent, validating TCP proxy for live bunqueue and quicx traffic.

Design: one layer above the codecs (it imports :mod:`queuewire.codecs` and
:mod:`queuewire.spec` only; the reference servers and clients appear in its tests), a sans-IO
core in an asyncio shell, as h11 is. ``framing`` cuts each direction of a connection into
whole frames by the protocol's length field (read from the spec) and hands each to the
codec's decoder, so every byte lands in exactly one frame or gap; ``bunqueue`` and ``quicx``
pair requests with replies (reqId; order and task id) and judge both directions with the
codecs' typed errors and the validator, each finding at the level of the requirement it
cites (``model.verdict_of``: MUST -> FAIL, SHOULD -> WARN, else INFO); ``analyzer`` is the
core (``feed(conn_id, direction, bytes, t_ns)`` -> findings and pairs, bounded aggregates per
connection and per command); ``proxy`` is the shell (forward first, unchanged; analyse at a
lower priority, in slices, within a bounded lag; half-closes, refusals, backpressure);
``trace`` loads the recording format of ``spec/trace.yaml`` and reads trace directories,
``record`` writes them (sharded by connection, rotated by size); ``report`` draws the
console, JSON and HTML reports. The analysis can never alter a byte, and holds none back
unless it falls more than ``max_backlog`` behind (then reading pauses: bounded memory); the
proxy writes before the analyzer reads.
"""
