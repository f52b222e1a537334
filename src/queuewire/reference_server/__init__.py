"""Reference daemons for the queuewire protocols, built on the sans-IO codecs.

Each daemon is split like h11: a pure core that takes decoded messages and connection events
and returns the frames to send and the connections to close, with no sockets and no clock,
and a thin asyncio shell that owns the sockets. The quicx daemon is the package ``quicx``:
``pool`` (the size-class pool), ``engine`` (the task queue and the credit-based workers),
``connection`` (one peer's decoding and error reactions, a bounded number of frames per call)
and ``tcp`` (the shell, :class:`~queuewire.reference_server.quicx.QuicxServer`, also behind
``queuewire serve quicx``). The shells share ``_service`` (lifecycle, listen backlog) and
``_flow`` (frames per turn, output high-water mark, partial-frame timeout).
The bunqueue server is the package ``bunqueue``, whose rooms mirror
the spec: ``engine`` (state, dispatch and the seams ``handle``, ``notify``, ``tick``) composed
of ``lifecycle`` (the job-lifecycle table), ``timers`` and ``commands`` (one module per command
file of ``spec/bunqueue/commands/``), over the ``store``/``sqlite`` persistence seam, with the
shells ``tcp`` (:class:`~queuewire.reference_server.bunqueue.BunqueueServer`, ``queuewire
serve bunqueue``) and ``http``. Behaviour is read from the profile's ``semantics`` flags,
limits and error tables, never from its name, so one implementation serves every profile of a
protocol.
"""
