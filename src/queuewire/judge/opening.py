"""How a bunqueue client opens a connection (BQ-HELLO-1): judged once, here, for every tool.

Document 001: "Clients should send a Hello command after connecting to negotiate protocol
version and discover server capabilities." A connection opens well when its first command is
Hello, or Auth then Hello (document 001 refuses every command before Auth when the server has
a token, so Auth may come first). ``conform client`` judges the clients it drives with
:func:`opens_with_hello`; the tap and the trace pipeline judge every tapped connection with it
as its commands arrive.
"""

from __future__ import annotations

from collections.abc import Sequence

HELLO, AUTH = "Hello", "Auth"
#: the requirement the opening is judged on
OPENING_RULE = "BQ-HELLO-1"


def opens_with_hello(commands: Sequence[str]) -> bool | None:
    """Whether a connection whose first commands are ``commands`` opened with Hello (or Auth,
    Hello); None while it cannot be told yet (no command, or only an Auth)."""
    if not commands:
        return None
    if commands[0] == HELLO:
        return True
    if commands[0] != AUTH:
        return False
    if len(commands) < 2:
        return None
    return commands[1] == HELLO
