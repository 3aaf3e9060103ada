"""The in-flight table's inlined ack path (``InflightTable._ack_psns``: a
first transmission still in flight skips the general ``_ack``) changes
nothing: random sends, SACKs, RTOs and tail-loss probes leave the same
state, and each SACK the same result, whether the inlined path is taken or
every packet goes through ``_ack``."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import fields
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sender_kit import Ev

from transport.inflight import AckResult
from transport.loss_policy import LossKind, LossVerdict
from transport.sender import Sender, SentPacket
from wire.packets import Sack

MASK = 0xFFFFFFFF
EVS = (Ev(0, 1), Ev(0, 2), Ev(1, 1), Ev(1, 3))


def _key(ev: Ev) -> int:
    return (ev.plane << 16) | ev.value


def _ack_psns_through_ack(self: Sender, psns: Iterable[int], res: AckResult) -> None:
    """What ``_ack_psns`` means: ``_ack`` each PSN in flight or declared lost."""
    for psn in psns:
        p = self.inflight.get(psn)
        if p is not None:
            self._ack(p, res)
        elif (p := self._lost.get(psn)) is not None:
            self._ack(p, res, was_lost=True)


class _General(Sender):
    """A sender whose every acknowledgement takes the general path."""

    _ack_psns = _ack_psns_through_ack


def _new(cls: type[Sender] = Sender) -> Sender:
    """A sender whose RTO fires within a test's few milliseconds."""
    return cls(payload_size=1000, initial_rtt=100e-6, min_rto=1e-3, max_rto=0.1,
               reorder_fraction=0.25, ack_delay=10e-6, psn_window=1 << 16)


_FIELDS = tuple(f.name for f in fields(SentPacket) if f.name != "data")


def _packet(p: SentPacket) -> tuple[Any, ...]:
    return (*(getattr(p, name) for name in _FIELDS), p.data is None)


def _state(s: Sender, sent: list[SentPacket]) -> dict[str, Any]:
    return {
        "packets": [_packet(p) for p in sent],
        "inflight": list(s.inflight), "lost": list(s._lost),
        "retx": [p.psn for p in s.retx_queue], "resent_acked": list(s._resent_acked),
        "ev_acked_seq": dict(s._ev_acked_seq), "largest_acked_seq": s.largest_acked_seq,
        "cum_acked": s.cum_acked, "bytes_in_flight": s.bytes_in_flight,
        "bytes_acked": s.bytes_acked, "reorder_extra": s.reorder_extra,
        "spurious_losses": s.spurious_losses, "recovered": list(s.recovered),
        "slowest_recovery": (s.slowest_recovery, s.slowest_recovery_sends),
        "messages": (dict(s._msg_segments), dict(s._msg_size)),
        "rtt": (s.rtt.srtt, s.rtt.rttvar, s.rtt.min_rtt, s.every_rtt.srtt, s.ack_delay),
        "paths": (dict(s.path_model.plane_srtt), dict(s.path_model.ev_srtt)),
        "counters": (s.packets_sent, s.retransmissions, s.lost_by_ev_order, s.lost_by_time,
                     s.lost_by_rto, s.twin_resends, s.last_progress, s.rto_backoff),
    }


def _result(res: AckResult) -> tuple[Any, ...]:
    def psns(ps: list[SentPacket]) -> list[int]:
        return [p.psn for p in ps]

    return (psns(res.newly_acked), psns(res.lost), res.messages_acked, res.rtt,
            res.sampled.psn if res.sampled else None, res.acked_bytes, res.plane_rtt,
            psns(res.late), res.late_echo.psn if res.late_echo else None, res.late_rtt,
            res.host_delay)


_sack = st.tuples(st.just("sack"), st.integers(0, 100), st.integers(0, (1 << 64) - 1),
                  st.integers(0, 1), st.integers(0, 100),
                  st.sampled_from(("latest", "latest", "first", "previous", "none", "stale")),
                  st.integers(0, len(EVS) - 1), st.sampled_from((0, 3, 400)))
_ops = st.lists(st.tuples(st.one_of(st.integers(1, 300), st.integers(300, 3000)), st.one_of(
    st.tuples(st.just("enqueue"), st.integers(1, 6000)),
    st.tuples(st.just("send"), st.integers(1, 12), st.integers(0, len(EVS) - 1),
              st.integers(0, len(EVS) - 1)),
    _sack, _sack, _sack,
    st.tuples(st.just("rto")),
    st.tuples(st.just("tlp")),
)), min_size=20, max_size=100)


def _verdicts(s: Sender, lost: list[SentPacket]) -> None:
    """Verdicts on ``lost`` that vary by PSN: some heard by the controller,
    some resent as twins."""
    s.on_verdicts(lost, [LossVerdict(LossKind.HOST_NOISE, p.psn % 2 == 0, False,
                                     p.psn % 3 == 0) for p in lost])


class _Pair:
    """The sender under test and the general-path one, driven alike."""

    def __init__(self, fast: type[Sender] = Sender, general: type[Sender] = _General) -> None:
        self.fast, self.general = _new(fast), _new(general)
        self.sent: dict[Sender, list[SentPacket]] = {self.fast: [], self.general: []}
        self.sends: dict[int, list[tuple[int, Ev]]] = {}  # psn -> (timestamp, EV) per copy
        self.now = 0.0

    def both(self) -> tuple[Sender, Sender]:
        return self.fast, self.general

    def send(self, n: int, ev: Ev, twin: Ev) -> None:
        for _ in range(n):
            self.now += 1e-6
            ts = int(self.now * 1e6) & MASK
            items = [s.next_packet() for s in self.both()]
            if items[0] is None or items[1] is None:
                assert items[0] is items[1] is None
                return
            for s, item in zip(self.both(), items, strict=True):
                p = item[0]
                if not p.transmissions:
                    self.sent[s].append(p)
                s.on_sent(p, ev=ev, ev_key=_key(ev), now=self.now, timestamp=ts)
                if p.twin and twin != ev:
                    s.on_twin_sent(p, twin, _key(twin))
            copies = self.sends.setdefault(p.psn, [])
            copies.append((ts, ev))
            if p.twin_ev is not None and p.sent_time == self.now:
                copies.append((ts, p.twin_ev))  # a twin: two copies, one timestamp

    def sack(self, cum_at: int, bitmap: int, below: int, ack_at: int, echo: str,
             ev_at: int, ack_delay: int) -> Sack | None:
        s = self.fast
        lo, hi = s.cum_acked, s.next_psn
        if hi == 0:
            return None
        cum = lo + (hi - lo) * cum_at // 100
        base = max(0, cum - below)
        bitmap &= (1 << max(0, min(64, hi - base))) - 1
        ack_psn = max(0, lo - 2) + (hi - max(0, lo - 2) - 1) * ack_at // 100
        copies = self.sends.get(ack_psn, [(0, EVS[ev_at])])
        ts, ev = {"latest": copies[-1], "first": copies[0], "previous": copies[-2:][0],
                  "none": (0, EVS[ev_at]),
                  "stale": (copies[-1][0] - 7, EVS[ev_at])}[echo]
        return Sack(cum & MASK, base & MASK, bitmap, ack_psn & MASK, ev.value, ts & MASK,
                    1 << 20, 0, ev.plane, ack_delay)

    def step(self, dt_us: int, op: tuple[Any, ...]) -> None:
        self.now += dt_us * 1e-6
        kind = op[0]
        if kind == "enqueue":
            for s in self.both():
                s.enqueue(bytes(op[1]))
        elif kind == "send":
            self.send(op[1], EVS[op[2]], EVS[op[3]])
        elif kind == "sack":
            sack = self.sack(*op[1:])
            if sack is None:
                return
            now_us = int(self.now * 1e6) & MASK
            results = [s.on_sack(sack, now=self.now, now_us=now_us) for s in self.both()]
            assert _result(results[0]) == _result(results[1]), sack
            for s, res in zip(self.both(), results, strict=True):
                # What the connection does next: verdicts, losses taken back.
                _verdicts(s, res.lost)
                for p in res.late:
                    s.take_back_loss(p)
        elif kind == "rto":
            expired = [s.on_rto(self.now) for s in self.both()]
            assert [p.psn for p in expired[0]] == [p.psn for p in expired[1]]
            for s, lost in zip(self.both(), expired, strict=True):
                _verdicts(s, lost)
        else:
            probed = [[p.psn for p in s.on_tlp(self.now)] for s in self.both()]
            assert probed[0] == probed[1]
        assert _state(self.fast, self.sent[self.fast]) == \
            _state(self.general, self.sent[self.general]), op


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_ops)
def test_the_inlined_ack_path_equals_the_general_one(ops: list[tuple[int, tuple[Any, ...]]]
                                                     ) -> None:
    pair = _Pair()
    for dt_us, op in ops:
        pair.step(dt_us, op)


class _Counting(Sender):
    """Records the PSN of every ``_ack`` call (the general path)."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.general_acks: list[int] = []

    def _ack(self, p: SentPacket, res: AckResult, echo_ts: int | None = None,
             was_lost: bool = False) -> None:
        self.general_acks.append(p.psn)
        super()._ack(p, res, echo_ts, was_lost)


class _CountingGeneral(_Counting):
    _ack_psns = _ack_psns_through_ack


def test_the_two_senders_take_different_paths() -> None:
    """A cumulative SACK of four first transmissions: the sender under test
    acks all but the SACK's trigger inline, the other through ``_ack``."""
    pair = _Pair(_Counting, _CountingGeneral)
    fast, general = pair.fast, pair.general
    assert isinstance(fast, _Counting) and isinstance(general, _Counting)
    pair.step(1, ("enqueue", 4000))
    pair.step(1, ("send", 4, 0, 1))
    pair.step(100, ("sack", 100, 0, 0, 100, "latest", 0, 0))
    assert fast.cum_acked == general.cum_acked == 4
    assert fast.general_acks == [3]
    assert sorted(general.general_acks) == [0, 1, 2, 3]
