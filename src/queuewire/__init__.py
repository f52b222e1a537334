"""queuewire: specification, conformance suite and reference codecs for job-queue wire formats."""

__version__ = "0.1.0"
