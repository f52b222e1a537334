"""``queuewire.tap``: a transparent, validating TCP proxy for live bunqueue and quicx traffic.

Design: a thin asyncio shell over :mod:`queuewire.traffic`, the sans-IO analysis the trace
pipeline shares (framing, pairing, verdicts, the trace format and its recorder). ``proxy``
forwards first, unchanged, then analyses at a lower priority, in slices, within a bounded lag
(half-closes, refusals, backpressure); ``report`` draws the console, JSON and HTML reports
from the analyzer's summary. The analysis can never alter a byte, and holds none back unless
it falls more than ``max_backlog`` behind (then reading pauses: bounded memory); the proxy
writes before the analyzer reads.
"""
