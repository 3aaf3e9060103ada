"""One host's sending connections share its NICs.

Each connection's congestion controller caps its window at maxwnd, sized to
the NIC's line rate (BDP plus the target queue). A host that sends to three
peers at once then has three maxwnds in flight, and what the fabric cannot
take waits in the host's own transmit queue: it marks nothing and trims
nothing, so no controller ever hears of it. In the claims bench's
all-to-all (four hosts, 2 x 100 Mbit/s, virtual time) that queue averaged
3.3 ms and reached 9 ms, the smoothed RTTs were 3-11 ms on a fabric whose
base RTT is 0.1 ms, and every timer that scales with the RTT (loss
declaration, a plane's silence) scaled with it.

``HostShare`` counts the connections of one endpoint that have data to send
(queued, in flight or lost) and tells each controller how many there are
(``set_senders``); NSCC then gives each 1/n of maxwnd, so the host as a
whole holds what one connection would. A NIC that schedules its queue pairs
at line rate keeps the same total. Each connection reports itself at every
output pass (``note``): a new message and a final acknowledgement both stir
the connection, so its next pass sees the change.
"""

from __future__ import annotations

from typing import Protocol


class _Controller(Protocol):
    def set_senders(self, n: int) -> None: ...


class _Member(Protocol):
    @property
    def cc(self) -> _Controller: ...


class HostShare:
    """The sending connections of one host (``note`` each output pass)."""

    __slots__ = ("_active", "senders")

    def __init__(self) -> None:
        self._active: dict[int, _Member] = {}
        #: Connections with data to send (at least 1).
        self.senders = 1

    def note(self, conn: _Member, sending: bool) -> None:
        """``conn`` has data to send (``sending``) or not."""
        key = id(conn)
        if sending == (key in self._active):
            return
        if sending:
            self._active[key] = conn
        else:
            del self._active[key]
        n = max(1, len(self._active))
        if n != self.senders:
            self.senders = n
            for member in self._active.values():
                member.cc.set_senders(n)
        if sending:
            conn.cc.set_senders(n)  # the count may not have moved (1 -> 1)

    def __len__(self) -> int:
        return len(self._active)
