"""Reference clients for the queuewire protocols: a sans-IO core and an asyncio shell.

The core (``quicx_session``) is a set of state machines written as transition tables, like
h11's ``_state.py``: a session takes the bytes that arrived and the calls its user makes,
and returns events and the bytes to send; it owns no socket and reads time from an injected
clock, so every transition (request correlation, timeouts, heartbeats, graceful stop) is
testable without a network. The shell (``quicx``: :class:`~queuewire.client.quicx.QuicxProducer`,
:class:`~queuewire.client.quicx.QuicxWorker`, :class:`~queuewire.client.quicx.QuicxMonitor`)
runs a session over an asyncio stream. Behaviour comes from the profile's ``semantics``
flags and limits, so the same classes speak every profile.
"""
