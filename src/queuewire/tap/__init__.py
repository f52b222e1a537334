"""``queuewire.tap``: a transparent, validating TCP proxy for live bunqueue and quicx traffic.

Design: two processes around :mod:`queuewire.traffic`, the sans-IO analysis the trace
pipeline shares (framing, pairing, verdicts, the trace format and its recorder). The
*forwarder* (``forwarder``: standard library only, blocking sockets, two pump threads per
connection; ``epollfwd`` is its single-threaded alternative, ``--forwarder epoll``) moves the
bytes, unchanged, stamps each read at forward time and only then reports it, with opens, half-closes, resets
and refusals, as records over a Unix socket (``channel``), held and written in batches while
traffic flows; so forwarding never waits for the analysis, its GIL or its core. The
*analyzer* (``proxy``: ``TapServer``, an asyncio shell) owns the listening socket, reads the
channel and queues the events for ``backlog``, which analyses at a lower priority, in slices,
within a bounded lag (``--analysis-lag``), in the moments the forwarder reports quiet.
``inloop`` is the previous single-process proxy (``--forwarder loop``), forwarding on the
analyzer's own event loop. Memory is bounded: a pump holds one read, and an analyzer more
than ``max_backlog`` behind stops reading the channel, which stops the forwarder reading its
sockets. The analysis can never alter a byte. ``report`` draws the console, JSON and HTML
reports from the analyzer's summary.
"""
