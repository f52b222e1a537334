"""``queuewire.fuzz``: spec-driven fuzzers of bunqueue and quicx servers, over real TCP.

Design: sans-IO at the core, a thin asyncio shell around it, like the reference servers.
:mod:`.strategies` turns the spec into case generators (valid commands from the request
schemas, values at and beyond each limit, mutations, framing plans; quicx's type x version x
length grid) and draws a :class:`~.case.Case` as a pure function of ``(seed, index)``. The
generators are the fuzzer's own (:mod:`.gen`: seeded samplers, each with a hypothesis twin
built from hypothesis' public API for the tests' ``@given``; :mod:`.schema_gen`: valid
instances of the spec's subset of JSON Schema), so a case is the same bytes with any
hypothesis version; hypothesis is used through its public API only (the twins, and the
stateful machines).
:mod:`.oracles` predicts, with the spec's own decoder, what a server must do with a case's
bytes (reply, or close, per the ``reaction`` of each protocol error) and judges what came back:
every reply valid for its request, none lost or duplicated per reqId, the connection closed
only where the spec allows it, liveness; each finding cites a requirement id and its level,
and only a MUST makes a failure. :mod:`.runner` is the asyncio shell: it plays cases on reused
or fresh connections with TCP_NODELAY and the case's segmentation, shrinks a failing case by
delta debugging on its frames and writes a replayable transcript (:mod:`.case`); its runner is
synchronous (blocking sockets, one ``sendall`` per segment) and :mod:`.campaign` runs it in
N forked worker processes, worker ``w`` playing cases ``w, w+N, ...`` of the seed. Stateful
fuzzing (``queuewire fuzz --stateful``) checks a server against a model built from the spec:
bunqueue's job lifecycle in :mod:`.stateful`, quicx's dispatch (producers and workers) in
:mod:`.stateful_quicx`. :mod:`.replies` is client fuzzing's sans-IO half for both protocols:
client cases (testee actions, one reply broken by a recipe), the reply mutations and the
verdict; the conformance package plays them (``queuewire fuzz --client`` joins the two).
:mod:`.atheris_harness` is the optional coverage-guided harness over the codecs for long runs
(``python -m queuewire.fuzz.atheris_harness``, the ``atheris`` extra), with the oracles of the
in-process codec fuzz tests. The package imports codecs, spec, reference_server and client,
never conformance.
"""
