"""The send half of ``EndpointIO``: what the core hands out, onto the plane
sockets. A ``SealedRun`` goes in one UDP GSO ``sendmsg``; consecutive
datagrams of one peer, plane, EV and codepoint are batched the same way; a
kernel that refuses GSO gets datagrams one by one from then on."""

from __future__ import annotations

import errno
import time

from transport.datagram import Outgoing, SealedRun, Tap, TxPath
from transport.endpoint import Endpoint, PeerKey
from transport.udp import GSO_MAX_BYTES, GSO_MAX_SEGMENTS, PeerTable, PlaneSockets, errno_name
from wire.constants import Dscp

_DATA_DSCP = int(Dscp.DATA)
#: errnos that mean "this host cannot reach there on this plane now" (link
#: down, route gone or ignored after carrier loss, neighbour failed, firewall,
#: source address gone): the core parks the plane (``on_path_unreachable``).
_UNREACHABLE = frozenset((errno.ENETUNREACH, errno.EHOSTUNREACH, errno.ENETDOWN, errno.EPERM,
                          errno.EADDRNOTAVAIL))
#: errnos that mean "this kernel or device cannot do UDP GSO here".
_GSO_REFUSED = (errno.EIO, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOPROTOOPT)


class DatagramSender:
    """Part of ``EndpointIO``: ``_send`` and its counters."""

    endpoint: Endpoint
    planes: list[PlaneSockets]
    peers: PeerTable
    tap: Tap | None
    tx_datagrams: int
    tx_bytes: int
    tx_sends: int
    gso_sends: int
    tx_errors: dict[str, int]
    tx_unreachable: list[int]

    def _send(self, out: list[tuple[PeerKey, Outgoing, TxPath]]) -> None:
        if self.tap is not None:
            now = time.monotonic()
            flat: list[tuple[PeerKey, Outgoing, TxPath]] = []
            for peer, data, path in out:
                for d in data.datagrams() if isinstance(data, SealedRun) else (data,):
                    self.tap.on_tx(now, d, path)
                    flat.append((peer, d, path))
            out = flat
        planes = self.planes
        sockaddr = self.peers.sockaddr
        n_tx = 0
        n_bytes = 0
        n_sends = 0
        n_planes = len(planes)
        n_out = len(out)
        unreachable: dict[tuple[PeerKey, int], int] | None = None
        i = 0
        while i < n_out:
            peer, data, path = out[i]
            if not 0 <= path.plane < n_planes:
                # The core folds every plane into range; never let one bad
                # number abort the service pass (a CLOSE behind it would be lost).
                self.tx_errors["bad_plane"] = self.tx_errors.get("bad_plane", 0) + 1
                i += 1
                continue
            ps = planes[path.plane]
            dest = sockaddr(peer, path.plane, path.ev)
            if dest is None:
                self.tx_errors["no_route"] = self.tx_errors.get("no_route", 0) + 1
                i += 1
                continue
            pool = ps.pool
            sock = pool[path.ev % len(pool)]
            if isinstance(data, SealedRun):
                run = data
                # Datagrams per send: a run over 64 KB (jumbo frames) goes
                # in slices of whole datagrams, no copies.
                per = min(GSO_MAX_SEGMENTS, GSO_MAX_BYTES // run.size)
                if not ps.gso or per < 2:
                    # No GSO here: its datagrams, through the general path below.
                    out[i:i + 1] = [(peer, d, path) for d in run.datagrams()]
                    n_out = len(out)
                    continue
                anc = [ps.gso_cmsg(run.size)]
                if path.dscp != _DATA_DSCP:
                    anc += ps.cmsg[path.dscp]
                step = per * run.size
                buf = run.buf
                view = memoryview(buf) if len(buf) > step else None
                off = 0
                try:
                    while off < len(buf):
                        sock.sendmsg([buf if view is None else view[off:off + step]], anc, 0,
                                     dest)
                        self.gso_sends += 1
                        n_sends += 1
                        off += step
                except OSError as exc:
                    sent = min(len(buf), off) // run.size
                    n_tx += sent
                    n_bytes += min(len(buf), off)
                    if exc.errno in _GSO_REFUSED:
                        self._refuse_gso(ps)  # what is left, as datagrams (above)
                        out[i:i + 1] = [(peer, d, path) for d in run.datagrams()[sent:]]
                        n_out = len(out)
                        continue
                    unreachable = self._failed(exc, unreachable, (peer, path.plane),
                                               run.count - sent)
                    i += 1
                    continue
                n_tx += run.count
                n_bytes += len(buf)
                i += 1
                continue
            size = len(data)
            j = i + 1
            total = size
            if ps.gso:
                # The run of datagrams that can share one GSO send: same peer,
                # plane, EV and codepoint; equal sizes, only the last shorter.
                ev, plane, dscp = path.ev, path.plane, path.dscp
                while j < n_out and j - i < GSO_MAX_SEGMENTS:
                    p2, d2, path2 = out[j]
                    if isinstance(d2, SealedRun):
                        break  # a run goes in a send of its own
                    # The core hands a run one TxPath object: identity first.
                    if path2 is not path and (path2.ev != ev or path2.plane != plane
                                              or path2.dscp != dscp):
                        break
                    if p2 is not peer and p2 != peer:
                        break
                    n2 = len(d2)
                    if n2 > size or total + n2 > GSO_MAX_BYTES:
                        break
                    total += n2
                    j += 1
                    if n2 < size:
                        break
            try:
                if j == i + 1:
                    if path.dscp == _DATA_DSCP:
                        sock.sendto(data, dest)
                    else:
                        sock.sendmsg([data], ps.cmsg[path.dscp], 0, dest)
                else:
                    anc = [ps.gso_cmsg(size)]
                    if path.dscp != _DATA_DSCP:
                        anc += ps.cmsg[path.dscp]
                    # (no SealedRun among them: the grouping stops at one)
                    sock.sendmsg([d for _p, d, _t in out[i:j]], anc, 0, dest)  # type: ignore[misc]
                    self.gso_sends += 1
            except OSError as exc:
                if j > i + 1 and exc.errno in _GSO_REFUSED:
                    self._refuse_gso(ps)  # retry the same datagrams, one per call
                    continue
                unreachable = self._failed(exc, unreachable, (peer, path.plane), j - i)
                i = j
                continue
            n_tx += j - i
            n_bytes += total
            n_sends += 1
            i = j
        self.tx_datagrams += n_tx
        self.tx_sends += n_sends
        self.tx_bytes += n_bytes
        if unreachable:
            now = time.monotonic()
            if len(self.tx_unreachable) < n_planes:
                self.tx_unreachable += [0] * (n_planes - len(self.tx_unreachable))
            for (peer, plane), n in unreachable.items():
                self.tx_unreachable[plane] += n
                self.endpoint.on_path_unreachable(peer, plane, now, n)

    def _refuse_gso(self, ps: PlaneSockets) -> None:
        """This kernel or device cannot segment: one datagram per call on
        this plane from now on, and back to per-packet spraying (runs would
        now only be bursts)."""
        ps.gso = False
        self.tx_errors["gso_refused"] = self.tx_errors.get("gso_refused", 0) + 1
        self.endpoint.set_spray_run(1)

    def _failed(self, exc: OSError, unreachable: dict[tuple[PeerKey, int], int] | None,
                key: tuple[PeerKey, int], n: int) -> dict[tuple[PeerKey, int], int] | None:
        """A send of ``n`` datagrams to ``key`` (peer, plane) failed: a full
        socket buffer (EAGAIN/ENOBUFS) is a loss like any other, which the
        core recovers, so it is counted, never waited on; an unreachable
        one (the host's own link or route is gone) is also added to what
        the core hears once per (peer, plane) after this pass, so that it
        routes around."""
        self._count_tx_error(exc)
        if exc.errno in _UNREACHABLE:
            if unreachable is None:
                unreachable = {}
            unreachable[key] = unreachable.get(key, 0) + n
        return unreachable

    def _count_tx_error(self, exc: OSError) -> None:
        name = errno_name(exc)
        self.tx_errors[name] = self.tx_errors.get(name, 0) + 1

