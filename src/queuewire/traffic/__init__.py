"""``queuewire.traffic``: the sans-IO analysis of bunqueue and quicx traffic, live or recorded.

Design: one layer above the codecs (it imports :mod:`queuewire.codecs` and
:mod:`queuewire.spec` only), bytes in and findings, pairs and rows out, no sockets and no
clock, so the live tap (:mod:`queuewire.tap`, an asyncio proxy) and the recorded-traffic
pipeline (:mod:`queuewire.trace`, plain Python or Spark) judge with the same code. ``framing``
cuts each direction of a connection into whole frames by the protocol's length field (read
from the spec) and hands each to the codec's decoder, so every byte lands in exactly one
frame or gap; ``bunqueue`` and ``quicx`` pair requests with replies (reqId; order and task
id) and judge both directions with the codecs' typed errors and the validator, each finding
at the level of the requirement it cites (:func:`queuewire.judge.requirement_verdict`: MUST
-> FAIL, SHOULD -> NON-STRICT, else INFO); ``analyzer`` is the core (``feed(conn_id,
direction, bytes, t_ns)`` -> findings and pairs, bounded aggregates per connection and per
command; with ``detect``, it holds the traffic back until the profile is known);
``detect`` finds the profile from the traffic itself (the frames read as each profile of
the protocol reads them: what only some allow is the evidence), for the tap, the pcap
import and the trace analysis alike; ``trace_format`` loads the recording format of
``spec/trace.yaml`` and reads trace files, ``record`` writes them (sharded by connection,
rotated by size); ``inventory`` is the bookkeeping of what a server keeps (the profile's
``resources``: list requests, what a run made, the removals, what is left, health probes and
the breaks they show), used by ``conform server`` and ``fuzz`` to leave a server as they
found it.
"""
