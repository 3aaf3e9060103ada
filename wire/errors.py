"""The one error type that decoding network bytes may raise."""

from __future__ import annotations


class WireError(Exception):
    """A datagram that is not a valid, authentic, fresh Braid packet.

    ``reason`` is a short stable slug (``short``, ``version``, ``type``,
    ``header_len``, ``field``, ``tag``, ``replay``, ``plaintext``, ``epoch``,
    ``payload_len``) that receivers use as a counter name; ``detail`` is for
    humans.
    """

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail
