"""Testee adapters: known clients behind the testee contract (docs/conformance/client-testee.md).

Design: :mod:`.contract` is the adapter side of the contract and imports no client: it reads
one request line at a time from stdin, hands it to an adapter's ``play(request)`` coroutine
and writes ``{"scenario", "results"}`` on stdout (logs go to stderr), and turns any exception
of an action into a result with its ``error_type``. Each adapter is a module runnable with
``python -m``: :mod:`.queuewire_client` drives queuewire's own bunqueue client (Queue, Worker),
:mod:`.bunqueue_pypi` the PyPI ``bunqueue-client`` (its blocking API, in a thread). The npm
``bunqueue`` client's adapter is JavaScript (``tests/interop/bunqueue_js_testee.mjs``, run
with bun). Adapters map the contract's options onto their client's own names and report an
option or action their client has no equivalent for (``unsupported``), never fake it.
"""

from __future__ import annotations

__all__: list[str] = []
