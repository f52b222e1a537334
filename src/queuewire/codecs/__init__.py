"""``queuewire.codecs``: sans-IO codecs of both protocols, generated from the spec at run time.

Design: one layer above :mod:`queuewire.spec`, which is all it imports; the reference
servers, clients, vectors and the conformance suite all speak the wire through it. Nothing
here opens a socket or reads a clock: a decoder takes bytes as they arrive and returns
complete messages, whatever the segmentation, and an encoder returns bytes. ``bunqueue``
frames MessagePack maps behind a u32 length prefix; ``quicx`` decodes and encodes the binary
header and payload layouts; ``validation`` checks decoded bunqueue messages against the
spec's JSON Schemas with cited verdicts; ``errors`` holds the typed protocol errors every
decoder raises, each naming its requirement id, byte offset and the reaction the protocol
demands (``close``, ``reply`` or ``raise``). Limits, opcodes, error kinds and requirement
ids come from the loaded profile, never from constants here. Import the modules themselves
(``queuewire.codecs.bunqueue``, ...): this ``__init__`` re-exports nothing.
"""
