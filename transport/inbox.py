"""The daemon's inbox: delivered messages waiting for a ``recv`` client.

One FIFO per peer, served by deficit round robin (bytes): while several
peers have messages waiting, each gets the same share of what the clients
take, whatever order their messages completed in. A single FIFO across all
connections handed the client messages in arrival order, so a peer that
had filled the inbox (it holds up to ``recv_window`` per connection) kept
its share of the consumer for as long as that backlog lasted, and a peer
that started later waited behind all of it: the claims bench's fairness row
(8 flows into one host whose client was slower than the network) saw the
eighth flow's first message reach the application ~1 s after it arrived.
With back-pressure on (the daemon returns a connection's credit only when a
client took its message), the consumer's fair service order is also the
senders' fair share of the link.

Order within one peer is kept (messages of a connection are delivered in
completion order). ``extendleft`` puts back messages a client had been
given and did not acknowledge: they go out first, in their original order,
ahead of every peer's queue.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator

Item = tuple[str, int, bytes]  # (peer, msg_id, data)

#: Bytes a peer may take per round before the next peer's turn.
QUANTUM = 64 << 10


class Inbox:
    def __init__(self, quantum: int = QUANTUM) -> None:
        if quantum <= 0:
            raise ValueError("quantum must be positive")
        self.quantum = quantum
        self._requeued: deque[Item] = deque()
        self._queues: dict[str, deque[Item]] = {}
        self._ring: deque[str] = deque()  # peers with a queue, in service order
        self._deficit: dict[str, int] = {}
        self._head_topped = False  # the ring's head got its quantum for this turn
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0

    def __iter__(self) -> Iterator[Item]:
        """Every waiting message (requeued first, then peer by peer)."""
        yield from self._requeued
        for q in self._queues.values():
            yield from q

    def append(self, item: Item) -> None:
        peer = item[0]
        q = self._queues.get(peer)
        if q is None:
            # A peer with nothing waiting joins at the back of the ring with
            # no credit saved from earlier turns (DRR: an idle queue's
            # deficit is reset).
            q = self._queues[peer] = deque()
            self._ring.append(peer)
            self._deficit[peer] = 0
        q.append(item)
        self._len += 1

    def extendleft(self, items: Iterable[Item]) -> None:
        """Put back messages (as ``deque.extendleft``: the last given goes first)."""
        for item in items:
            self._requeued.appendleft(item)
            self._len += 1

    def popleft(self) -> Item:
        if self._requeued:
            self._len -= 1
            return self._requeued.popleft()
        if not self._ring:
            raise IndexError("pop from an empty inbox")
        while True:
            peer = self._ring[0]
            q = self._queues[peer]
            if not self._head_topped:
                self._deficit[peer] += self.quantum
                self._head_topped = True
            size = max(1, len(q[0][2]))
            if size <= self._deficit[peer]:
                self._deficit[peer] -= size
                item = q.popleft()
                self._len -= 1
                if not q:
                    self._ring.popleft()
                    del self._queues[peer]
                    del self._deficit[peer]
                    self._head_topped = False
                return item
            # Not enough credit for its next message: the next peer's turn.
            self._ring.rotate(-1)
            self._head_topped = False
