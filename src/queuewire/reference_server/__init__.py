"""Reference daemons for the queuewire protocols, built on the sans-IO codecs.

Each daemon is split like h11: a pure core that takes decoded messages and connection events
and returns the frames to send and the connections to close (``quicx_engine``: the task
queue, the workers, the size-class pool and the per-connection protocol logic, with no
sockets and no clock), and a thin asyncio shell that owns the sockets (``quicx``:
:class:`~queuewire.reference_server.quicx.QuicxServer`, also behind ``queuewire serve
quicx``). The bunqueue core is ``bunqueue_engine`` (every command of document 001 with real
job semantics, its time-driven work in ``tick()``, and long polls as ``Wait`` values the shell
retries on the engine's events) over the ``bunqueue_store`` persistence seam; its asyncio
TCP/HTTP shell is still to come. Behaviour is read from the profile's ``semantics`` flags,
limits and error tables, never from its name, so one implementation serves every profile of a
protocol.
"""
