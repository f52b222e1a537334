"""Reference clients for the queuewire protocols: a sans-IO core and an asyncio shell.

Design: the client layer sits on the codecs and the spec and beside the reference servers,
which it never imports (nor the vector generator; the import contracts in ``pyproject.toml``
check both). The core is a set of state machines written as transition tables, like h11's
``_state.py``: a session takes the bytes that arrived and the calls its user makes, and
returns events and the bytes to send; it owns no socket and reads time from an injected
clock, so every transition (request correlation, timeouts, heartbeats, graceful stop) is
testable without a network. The core has two rooms: ``session`` is what no protocol owns
(the connection and request tables, base errors and events, the state machine driver,
outbox and heartbeat timer), ready for a bunqueue session to share; ``quicx_session`` is the
quicx producer, worker and monitor built on it. The shell (``quicx``:
:class:`~queuewire.client.quicx.QuicxProducer`, :class:`~queuewire.client.quicx.QuicxWorker`,
:class:`~queuewire.client.quicx.QuicxMonitor`) runs a session over an asyncio stream and only
moves bytes and time. Behaviour comes from the profile's ``semantics`` flags and limits, so
the same classes speak every profile.
"""
