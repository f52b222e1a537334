"""Language-neutral test vectors, generated from the spec and checked against the codecs.

Design: ``vectors/`` (beside ``spec/``) holds JSON files an implementer in any language can
consume (the format is in ``vectors/README.md``); this package writes and checks them. The
wheel ships them as ``queuewire/_vectors`` beside its ``queuewire/_spec``, and
:func:`vectors_dir` finds them beside whichever spec is in use, so an installed copy checks
its own vectors. It
sits beside the codecs, one layer above them: it imports only :mod:`queuewire.spec` and
:mod:`queuewire.codecs`, and only the conformance suite and the CLI import it (the clients
and reference servers never do; an import-linter contract in ``pyproject.toml`` says so).
One module per protocol generates and checks that protocol's vectors (``bunqueue``,
``quicx``, neither importing the other); ``_common`` holds what both share (``FORMAT``, file
names, the byte-stable JSON writer); ``files`` walks every profile to write
(:func:`generate_all`) or check (:func:`check_all`) the files. Generation is deterministic,
so a file that differs from what the spec generates is stale.

Errors: :func:`check_all` returns a :class:`CheckResult` that counts files (missing, stale)
apart from vectors (failed of checked); a directory holding none of the files raises
:class:`VectorsError`, whose message names the directory, the files expected and how to
write them.
"""

from __future__ import annotations

from ._common import FORMAT, file_name, vectors_dir
from .bunqueue import bunqueue_vectors, check_bunqueue_vector, from_json
from .files import CheckResult, VectorsError, check_all, generate_all

__all__ = ["FORMAT", "CheckResult", "VectorsError", "bunqueue_vectors", "check_all",
           "check_bunqueue_vector", "file_name", "from_json", "generate_all", "vectors_dir"]
