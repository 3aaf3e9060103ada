"""The send scheduler: control packets, probes, retransmissions and new
data under the window, the pacer and the burst limit (``_output``)."""

from __future__ import annotations

import math
from typing import cast

from transport.conn_core import (
    _ACK_REQ,
    _DSCP_DATA,
    _DSCP_RETX,
    _LAST,
    _RETX,
    PEER_ACK_DELAY,
    _us,
)
from transport.conn_dispatch import ConnDispatch
from transport.datagram import Outgoing, SealedRun, TxPath, unrun
from transport.ev_state import Ev
from transport.psn import wire as psn_wire
from transport.sender import SentPacket


class ConnScheduler(ConnDispatch):
    """Part of ``Connection``: what goes out, and when."""

    def datagrams_to_send(self, now: float) -> list[tuple[bytes, TxPath]]:
        """What is due to leave, one datagram per item."""
        out = self.runs_to_send(now)
        if self.sealed_runs:
            return unrun(out)
        return cast(list[tuple[bytes, TxPath]], out)  # no SealedRun without sealed_runs

    def runs_to_send(self, now: float) -> list[tuple[Outgoing, TxPath]]:
        """What is due to leave; with ``sealed_runs`` set, a new-data run as
        one ``SealedRun`` (its datagrams back to back, one GSO send)."""
        if not self._stirred:
            return []  # nothing reached us since a call that found nothing
        self._timer_known = False
        out = self._output(now)
        self._stirred = bool(out)  # output may have more behind it (max_burst)
        return out

    def _output(self, now: float) -> list[tuple[Outgoing, TxPath]]:
        self._now = now
        share = self.host_share
        if share is not None:
            share.note(self, self.is_established and self.sender.has_pending)
        out = self._control
        self._control = []
        if not self.is_established:
            return out
        sealer = self._sealer
        assert sealer is not None
        self.health.send_probes(now, sealer, psn=psn_wire(self.sender.cum_acked),
                                timestamp=_us(now),
                                out=out)
        s, cc, cfg = self.sender, self.cc, self.config
        size = cfg.payload_size
        budget = cfg.max_burst
        # Per batch, not per packet: the window and the pacer are numbers
        # (one send_quota, one on_sent_run), new data is taken a spray run
        # at a time (one EV pick, one in-flight and one EV update per run),
        # and a run's TxPath is one object.
        # ``paced_runs`` (the I/O layer sends a run in one GSO call): paced
        # new data leaves a spray run per plane up at a time (``next_run``
        # splits what may leave over the planes). It waits for their tokens
        # (or for what is queued, if less), not for the packet or two the
        # tokens hold whenever the host wakes (decision 0045).
        # Retransmissions go a packet at a time, as soon as one fits.
        window, tokens, release, rate = cc.send_quota(now=now, size=self._release_bytes())
        need = min(float(size), release)  # one packet's (the pacer's burst bounds both)
        run_need = release  # what is left of the release under way
        sizes: list[int] = []
        health = self.health
        take, seal_data, append = s.take, sealer.seal_data, out.append
        retx_queue = s.retx_queue
        unsampled = self._rtt_unsampled
        tx_paths = self._tx_paths
        ts = _us(now)
        # A peer that holds SACKs back longer than we allow for anyway (its
        # SACKs' ACK Delay) is asked for one by the packet that fills the window.
        fill_req = s.ack_delay > PEER_ACK_DELAY
        while budget > 0 and (retx_queue or s.has_new_data):
            in_flight = s.bytes_in_flight
            if in_flight and in_flight + size > window and not (
                    s.probes_due and retx_queue and retx_queue[0].tlp
                    and self.paths.parked_planes()):
                # With a plane parked, a tail-loss probe goes out whatever
                # the window (as RFC 8985 7.3's probe does): a window held by
                # packets in flight on the dead plane, which nothing will
                # answer, otherwise waits for the RTO. (Not otherwise: probes
                # past the window cost the 8-flow fairness scenario 0.98 ->
                # 0.95 of its Jain median.)
                cc.can_send(in_flight=in_flight, size=size)  # window-bound: the controller notes it
                break
            if tokens < need and now + (need - tokens) / rate > now:
                break
            if retx_queue:
                item = s.next_packet()
                if item is None:
                    break
                p, payload = item
                retx = p.transmissions > 0
                ev = health.pick(now, p.ev if retx else None, s.rtt.srtt)
                if ev is None:
                    s.put_back(p)
                    break
                flags = (_RETX if retx else 0) | (_LAST if p.last else 0)
                if not retx_queue and not s.has_new_data:
                    flags |= _ACK_REQ  # the tail: don't make the receiver wait
                elif fill_req and in_flight + len(payload) + size > window:
                    flags |= _ACK_REQ  # it fills the window: only a SACK opens it
                plane, value = ev.plane, ev.value
                if unsampled and plane in unsampled:
                    flags |= _ACK_REQ  # this plane's base RTT, before a queue forms
                    unsampled.discard(plane)
                key = (plane << 16) | value
                dscp = _DSCP_RETX if retx else _DSCP_DATA
                path = tx_paths.get((key << 8) | dscp)
                if path is None:
                    path = tx_paths[(key << 8) | dscp] = TxPath(plane, value, dscp)
                append((seal_data(
                    psn=p.psn & 0xFFFFFFFF, ev=value, plane=plane, msg_id=p.msg_id,
                    msg_offset=p.offset, msg_len=p.msg_len, timestamp=ts, payload=payload,
                    flags=flags,
                ), path))
                s.on_sent(p, ev=ev, ev_key=key, now=now, timestamp=ts)
                health.on_sent(ev, now)
                if s.probes_due and p.tlp:
                    s.on_probe_sent()
                n = len(payload)
                sizes.append(n)
                tokens -= n
                budget -= 1
                if p.twin and budget > 0:
                    # Lost after a resend already: a second copy on another
                    # EV, same timestamp (sender.TWIN_AFTER_LOSSES).
                    ev2 = health.pick(now, ev, s.rtt.srtt)
                    if ev2 is not None and ev2 is not ev:
                        key2 = (ev2.plane << 16) | ev2.value
                        path2 = tx_paths.get((key2 << 8) | dscp)
                        if path2 is None:
                            path2 = tx_paths[(key2 << 8) | dscp] = TxPath(ev2.plane, ev2.value,
                                                                          dscp)
                        append((seal_data(
                            psn=p.psn & 0xFFFFFFFF, ev=ev2.value, plane=ev2.plane,
                            msg_id=p.msg_id, msg_offset=p.offset, msg_len=p.msg_len,
                            timestamp=ts, payload=payload, flags=flags,
                        ), path2))
                        s.on_twin_sent(p, ev2, key2)
                        sizes.append(n)
                        tokens -= n
                        budget -= 1
                continue
            if tokens < run_need and now + (run_need - tokens) / rate > now:
                break
            # New data: a run of up to k packets on the EV the policy picks once.
            first, more = take(1)
            if not first:
                break
            # What may leave now, so that a run takes only its plane's part.
            room = budget
            if in_flight:
                room = min(room, max(1, int((window - in_flight) // size)))
            else:
                room = min(room, max(1, int(window // size)))
            if tokens < math.inf:
                fit = 1 + int((tokens - need) // size)
                if run_need > need:  # the release's gate passed (to rounding): all of it
                    fit = max(fit, int(-(-run_need // size)))
                room = min(room, max(1, fit))
            ev, k = health.pick_run(now, room)
            if ev is None:
                s.put_back(first[0])
                break
            # k <= room: the window and the pacer have room for all k at full
            # size, so only the queue (its end, the PSN window, the credit)
            # can stop the run short.
            run = first
            if more and k > 1:
                rest, more = take(k - 1)
                run += rest
            sent = len(run)
            lengths = [q.length for q in run]
            nbytes = sum(lengths)
            # Only a SACK opens a window this run fills: its last packet asks.
            self._seal_run(run, ev, more, fill_req and in_flight + nbytes + size > window,
                           ts, out)
            sizes += lengths
            tokens -= nbytes
            run_need -= nbytes
            if run_need < need:
                run_need = release  # this release is out: the next waits for its own
            budget -= sent
            if sent < k:
                health.unsend_run(ev, k - sent)
            s.on_sent_run(run, ev=ev, ev_key=(ev.plane << 16) | ev.value, now=now,
                          timestamp=ts)
            health.on_sent_run(ev, now, sent)
            if sent < k and more:
                break  # stopped by the PSN window or credit
        cc.on_sent_run(now=now, sizes=sizes)
        if self._persist_at is None and s.credit_blocked and not s.has_outstanding:
            self._persist_at = now + s.rto()
        return out

    def _seal_run(self, run: list[SentPacket], ev: Ev, more: bool, fills: bool, ts: int,
                  out: list[tuple[Outgoing, TxPath]]) -> None:
        """Seal ``run`` (first transmissions, consecutive PSNs, on ``ev``) into
        ``out``: one ``seal_data_run`` per message it covers, kept whole as a
        ``SealedRun`` when the I/O layer sends runs (``sealed_runs``), else
        cut into datagrams. Flags as a packet-at-a-time loop would set them:
        LAST on a message's last segment; ACK_REQ on the run's first packet
        when its plane has no RTT sample yet, and on its last when it is the
        tail of the queue (not ``more``) or ``fills`` the window."""
        sealer = self._sealer
        assert sealer is not None
        plane, value = ev.plane, ev.value
        key = (((plane << 16) | value) << 8) | _DSCP_DATA
        path = self._tx_paths.get(key)
        if path is None:
            path = self._tx_paths[key] = TxPath(plane, value, _DSCP_DATA)
        end_flags = 0
        if not more:
            end_flags = _ACK_REQ  # the tail: don't make the receiver wait
        elif fills:
            end_flags = _ACK_REQ  # it fills the window: only a SACK opens it
        first_flags = 0
        unsampled = self._rtt_unsampled
        if unsampled and plane in unsampled:
            first_flags = _ACK_REQ  # this plane's base RTT, before a queue forms
            unsampled.discard(plane)
        whole = self.sealed_runs
        seg = self.sender.payload_size  # what the queue cut the run with
        i, n = 0, len(run)
        while i < n:
            p = run[i]
            j = i + 1
            msg_id = p.msg_id
            while j < n and run[j].msg_id == msg_id:
                j += 1
            if i == 0 and first_flags and j > 1:
                j = 1  # the first packet's flags are its own
            last = run[j - 1]
            flags = first_flags if i == 0 else 0
            last_flags = (_LAST if last.last else 0) | (end_flags if j == n else 0)
            data = p.data
            assert data is not None
            view = memoryview(data)[p.offset:last.offset + last.length]
            buf, count, dsize = sealer.seal_data_run(
                p.psn & 0xFFFFFFFF, value, plane, msg_id, p.offset, p.msg_len, ts, view, seg,
                flags, last_flags)
            if whole and count > 1:
                out.append((SealedRun(buf, count, dsize), path))
            elif count == 1:
                out.append((buf, path))
            else:
                out += [(buf[o:o + dsize], path) for o in range(0, len(buf), dsize)]
            i = j
