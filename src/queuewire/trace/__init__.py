"""``queuewire.trace``: recorded traffic, imported from pcap and validated at any scale.

Design: one layer with the tap above the sans-IO traffic core (:mod:`queuewire.traffic`), so
a recording is judged by exactly the code that judged it live. ``pcap`` turns a capture into
trace files (TCP reassembly by sequence number, holes recorded, then the tap's analyzer and
recorder) from the packets ``capture`` reads (pcap and pcapng records, link, IP and TCP
headers, every length a file declares checked before it is used); ``decode`` reads one
trace file into Arrow rows of one union schema (frames, violations, connections, and the
pairing's loose ends at the file's edges), with the tap's streams and judges, and refuses
a file that breaks the format's rules with a one-line TraceError; ``loose`` pairs the loose
ends of connections rotated into several files and settles what stays loose as the tap
would have; ``local`` (in process) and ``spark``
(PySpark: ``binaryFile`` + ``mapInArrow``, a small join for the loose ends, aggregates in the
DataFrame API) are the two engines; ``summary`` turns their identical aggregates into
``summary.json``; ``html`` draws it; ``analyze`` picks the files, the profile and the engine.
Counts are rows counted (exact under Spark task retries), never accumulators.
"""
