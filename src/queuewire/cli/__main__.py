"""``python -m queuewire.cli``: the ``queuewire`` command."""

from . import main

main()
