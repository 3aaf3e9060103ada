"""How much of a connection's traffic each plane gets.

Spraying evenly over planes is right while the planes are equal. When one is
slower (half its rate, or a longer queue), an even spray fills the slow
plane's queue while the others idle, and the one connection-wide window
cannot tell which plane is slow: the total is capped at planes x the slowest
plane's rate (2 x 50 / 150 = 0.67 of capacity at half rate).

``PlaneShares`` keeps one weight per plane and moves it so that every plane
shows the same queueing delay, the only signal that is per plane and free: each
SACK's echo times a round trip through one plane (``Sender`` reports it,
also when a faster plane's SACK already acknowledged the packet). A plane
whose queueing delay (RTT minus its own minimum, smoothed) sits above the
planes' mean gets a smaller share, one below it a larger one, so at
equilibrium every plane's queue drains in the same time: each carries in
proportion to its capacity, and the connection's window controller (NSCC)
sees one consistent delay. The weights are pulled back towards even, and
snap back to exactly even near it: equal planes are sprayed as before.
The weight is an integral (the delays averaged over a horizon move it) times
a proportional part (the present delays scale it, ``PGAIN``): the integral
holds an unequal split for unequal planes, the proportional part stops an
overshoot before the lagging average sees it.
Weights move at a rate per unit of time (``HORIZON``), not per update: the
smoothed delays lag by about a horizon, and a fixed move at every update
(one slowest RTT) overshot in proportion to how many updates a horizon held.
A plane that loses much more than the others is capped (``cap``); the cap
is a ceiling over the delay-driven weight (``dw``), not a change of it, so a
healed plane gets its share back as soon as its loss average drops.

Policy-free: it only says which plane the next packet should take
(``choose``); the path policy then sprays over that plane's EVs as usual.
A plane that is parked or has no usable EV is never chosen; when a plane is
parked or comes back, every plane's delay figures start again and the
returning plane has an even share (``reset``).

The samples are the sender's per-plane SACK echoes, the same ones the path
model (``rtt.py``) smooths into each plane's RTT; what is kept here is a
different fact, each plane's *queueing delay*: RTT less the plane's
minimum since any plane last went down or came up (``base``, forgotten
then: a plane back from a fault may come back on another route, and the
other planes' minimums must be learned over the same span to compare).
"""

from __future__ import annotations

import math

from transport.paths.rtt import PLANE_GAIN

#: Smoothing of each plane's queueing delay (per sample): the path model's
#: gain for a plane's RTT (``transport/paths/rtt.py``), as NSCC's.
DELAY_EWMA = PLANE_GAIN
#: Per ``HORIZON`` of time (an update moves by its share of one): how hard
#: a weight moves towards equal delays (exponent of the delay ratio), at most
#: by what factor either way, and how hard it is pulled back towards even (so
#: that delay noise, symmetric across planes, cannot walk the weights away).
#: Tuned on the claims testbed's half-rate row: gain 1.0 gave
#: 0.87-0.88 of capacity, 0.5 0.88-0.92, 0.25 0.85-0.96, 0.35 0.91-0.94;
#: the simulated 2 ms-jitter half-rate case wants at least 0.35 (0.90).
GAIN = 0.35
STEP = 4.0
PULL = 0.1
#: The proportional part (``_present``): each plane's weight is also scaled
#: by (mean + margin) / (its present queueing delay + margin) ** ``PGAIN``,
#: at most ``PSTEP`` either way, while the averages show room and the
#: present delay is on the same side of the mean as the average. Two equal
#: tail-drop links are a near-integrating plant: a 0.8 / 1.0 split puts the
#: whole queue on one link and idles the other at 0.8, and the averaged
#: integral alone, lagging by a horizon, swapped the larger share every
#: ~150 ms (each link at 0.7-1.0 by turns on the tail-drop testbed). 0.25:
#: 1.0 also settled them but doubled the hot-spine scenario's median step
#: during the fault (the plane's delay samples are bimodal there: a quarter
#: of its EVs cross the hot spine).
PGAIN = 0.25
PSTEP = 2.0
#: The present delay the proportional part reads: each plane's queueing
#: delay averaged over this (seconds), short against the integral's horizon.
PHORIZON = 0.01
#: The smallest share a live plane keeps (its feedback must keep flowing).
FLOOR = 1 / 16
#: Weights within this of even are even (exactly the plain spray).
EVEN = 0.97
#: Time over which the planes' delays are compared (seconds): longer than
#: the swings of queues every plane shares (an incast's, a busy host's), so
#: only a plane that is persistently slower loses share.
HORIZON = 0.05
#: Loss: a plane whose loss fraction (losses over losses + acknowledged
#: packets, averaged over its recent outcomes) exceeds the mean of the other
#: delivering planes' by more than ``LOSSY`` has its weight capped at
#: ``(1 - excess) ** LOSS_POWER``.
#: Queueing delay alone reads a lossy plane as an *idle* one (what it drops
#: never queues), so without this a gray host uplink, which loses on every EV
#: of its plane alike, drew the largest share (the invisibility row on
#: 4 planes). Equal loss on every plane moves nothing. The loss memory
#: survives a park: a plane unparked by a probe that got through is still
#: the plane that lost half of what it carried.
LOSSY = 0.1
LOSS_POWER = 4
#: Each plane's losses and acknowledgements add up until there are
#: ``LOSS_SAMPLES`` of them, then fold into its loss fraction, an average over
#: its last ~``LOSS_MEMORY`` outcomes (weight n / LOSS_MEMORY). Counted in
#: outcomes, not time: per update interval with a time weight, a plane at a
#: small share (the cap itself, or the floor) never reached the count and kept
#: its cap after the link healed (a spine reboot in ``braid demo`` left plane 0
#: at 11% of the packets for the rest of the transfer), and a window spanning
#: an idle gap between bursts weighed as if it were 50 ms of evidence. A loss
#: acknowledged after all (a copy overtaken by a less queued plane's, or one
#: whose trim was heard after it was declared lost) is taken back (``on_late``).
LOSS_SAMPLES = 16
LOSS_MEMORY = 64
#: Round trips a plane must have shown before its figures count.
LIVE = 8
#: Shares move only while the least queued plane shows under this fraction
#: of the most queued one's delay (both plus the noise margin). 0.5 let two
#: equal tail-drop planes, whose queues swing 1.3 ms against 3.2 ms under an
#: ACK-clocked sender (runs end with each burst, so a rotation per run is not
#: exactly even in packets), start moving shares and oscillate (srtt 1.2x the
#: limit, 0.87 of capacity); at 0.3 they stay even while a half-rate or a 4x
#: latency plane still moves (sim: 0.95 / 0.95, 0.92 with 2 ms host jitter).
#: Known limit: with 4 ms of host jitter the margin (one base RTT, 4 ms there)
#: reads a half-rate plane's 16 ms queue against 2.5 ms as no room (0.66 of
#: capacity). Taking the margin out of the ratio (start at min < 0.2 max and
#: max - min > margin, hold while min < 0.5 max) gave 0.93 there, but moved
#: equal planes' shares on a loaded real host (``braid demo`` in CI: one
#: healthy plane at 0.146 of the packets) and did not move the real half-rate
#: row (0.73-0.85 with either rule), so the margin stays.
ROOM = 0.3


def _loss_cap(excess: float) -> float:
    """The weight cap of a plane whose loss fraction exceeds the other
    planes' by ``excess``: none within ``LOSSY``."""
    return max(FLOOR, (1.0 - excess) ** LOSS_POWER) if excess > LOSSY else 1.0


class PlaneShares:
    """Per-plane weights from per-plane queueing delay; smooth weighted
    round robin over the planes a caller says are eligible."""

    __slots__ = (
        "_eligible",
        "acked",
        "base",
        "cap",
        "credit",
        "dw",
        "even",
        "last_update",
        "lf",
        "lost",
        "lt",
        "margin",
        "mt",
        "next_update",
        "qdelay",
        "samples",
        "unit",
        "updates",
        "weight",
    )

    def __init__(self, planes: int, *, margin: float = 20e-6) -> None:
        #: Delay that counts as noise (added to both sides of the ratio): at
        #: most half the fastest plane's base RTT.
        self.margin = margin
        self.base = [math.inf] * planes
        self.qdelay = [0.0] * planes
        self.samples = [0] * planes
        self.weight = [1.0] * planes
        #: The weight the delays alone would give, and each plane's loss cap:
        #: the share is the smaller (a cap lifts at once when the loss ends).
        self.dw = [1.0] * planes
        self.cap = [1.0] * planes
        self.credit = [0.0] * planes
        self.even = True
        self.next_update = -math.inf
        self.last_update: float | None = None
        #: Each plane's queueing delay averaged over ``HORIZON``.
        self.lt = [0.0] * planes
        #: Each plane's queueing delay averaged over ``PHORIZON``.
        self.mt = [0.0] * planes
        self.updates = 0
        #: The planes the last ``choose`` could pick from (``charge`` bills them).
        self._eligible: list[bool] | None = None
        #: Losses and acknowledged packets per plane not yet folded, and each
        #: plane's loss fraction (averaged over ~``LOSS_MEMORY`` outcomes).
        self.lost = [0] * planes
        self.acked = [0] * planes
        self.lf = [0.0] * planes
        #: What one loss of each plane's last fold added to ``lf``.
        self.unit = [0.0] * planes

    def on_outcome(self, plane: int, *, lost: int = 0, acked: int = 0) -> None:
        """Packets sent on ``plane`` were declared lost or acknowledged.
        Losses count once the plane is timed (``LIVE`` round trips): before
        that the sender's loss detection does not know the plane's RTT, and a
        slow plane's packets were declared lost only for being slow.
        Acknowledgements always count: delivery is evidence whatever the
        timing. A plane back from a park with its loss cap (a spine reboot
        parks a plane whose other spine still works) carries the floor share,
        and at that share its own round trips are rarely the newest a SACK
        echoes; were its acknowledgements held back until it was timed again,
        the cap outlived the fault by half a second (``braid demo``: plane 0
        at 0.13 of the packets for a 300 ms reboot)."""
        if 0 <= plane < len(self.lost):
            self.acked[plane] += acked
            if self.samples[plane] >= LIVE:
                self.lost[plane] += lost

    def on_late(self, plane: int) -> None:
        """A packet sent on ``plane`` that was declared lost was acknowledged
        after all: take the loss back (from the average if it was folded in
        already: a copy overtaken by a less queued plane's is often acknowledged
        a window of outcomes later)."""
        if not 0 <= plane < len(self.lost):
            return
        if self.lost[plane] > 0:
            self.lost[plane] -= 1
        else:
            self.lf[plane] = max(0.0, self.lf[plane] - self.unit[plane])

    def on_rtt(self, plane: int, rtt: float, now: float) -> None:
        """A round trip through ``plane`` (seconds)."""
        if not 0 <= plane < len(self.base) or rtt <= 0:
            return
        if rtt < self.base[plane]:
            self.base[plane] = rtt
        self.qdelay[plane] += DELAY_EWMA * (rtt - self.base[plane] - self.qdelay[plane])
        self.samples[plane] += 1
        if now >= self.next_update:
            self._update(now)
            # Once per slowest plane's round trip, queue included: a new
            # share shows in every plane's delay only after that.
            self.next_update = now + max(b + q for b, q in zip(self.base, self.qdelay,
                                                                strict=True) if b < math.inf)

    def on_base(self, plane: int, rtt: float) -> None:
        """A round trip through ``plane`` without its data queue (a trimmed
        header's, ``EvWatcher.plane_base``): the plane's minimum, if lower.
        A connection that starts while a plane's queue stands (a newcomer
        beside flows that keep one last hop's queue at its trim threshold)
        never sees an echo without that queue: its minimum would hold the
        queue, the fuller plane would read as the idle one, and moving share
        onto it keeps it full (the claims' fairness row at 12 Mbit/s: the
        newcomers at 0.06-0.66 of their share on the less queued plane, and
        a flow on the emptier plane got 4x the last one's bytes). Its trims
        show it without."""
        if 0 <= plane < len(self.base) and 0 < rtt < self.base[plane]:
            self.base[plane] = rtt

    def reset(self, plane: int) -> None:
        """The plane was parked (or came back): every plane's delay figures
        start again, and ``plane`` comes back with an even share (its cap if
        it was losing).

        Every plane's, not only this one's: a queueing delay is an RTT less
        the plane's minimum, and minimums learned over different spans do not
        compare. On a loaded host a park is most often the host's own stall,
        not the plane's; the returning plane then learned its minimum under
        that load while the others kept one from an idle moment, read the
        same host delay as queue and lost their share to it (3-4 ms of host
        delay on both planes after an idle 0.1 ms: the kept plane fell to the
        floor share, tests/unit/test_scenarios_asym.py). The loss averages are
        kept: they are the plane's record, not a reading against a baseline,
        and so is every other plane's count of round trips (``LIVE``): it
        says the sender has timed the plane, which a park elsewhere does not
        undo. Zeroed for all, a plane capped at a small share for its losses
        (a spine reboot's) stopped counting outcomes until it had shown
        ``LIVE`` more round trips, and kept the cap (``braid demo``: plane 0
        at 0.14 of the packets after plane 2 came back, 0.21-0.24 before)."""
        self.samples[plane] = 0
        for p in range(len(self.base)):
            self.base[p] = math.inf
            self.qdelay[p] = 0.0
            self.lt[p] = 0.0
            self.mt[p] = 0.0
            self.dw[p] = 1.0
            self.credit[p] = 0.0
        self.last_update = None
        self.next_update = -math.inf
        # Back with an even share, unless it was losing: then with its cap.
        others = [x for q, x in enumerate(self.lf) if q != plane]
        excess = self.lf[plane] - (sum(others) / len(others) if others else 0.0)
        self.cap[plane] = _loss_cap(excess)
        for p in range(len(self.weight)):
            self.weight[p] = self.cap[p]
        self.even = all(w == 1.0 for w in self.weight)

    def _update(self, now: float) -> None:
        live = [p for p, n in enumerate(self.samples) if n >= LIVE]
        last, self.last_update = self.last_update, now
        if last is None or not live:
            return
        self.updates += 1
        pf = self._delay_weights(live, now - last) if len(live) > 1 else None
        self._loss_caps()
        # Every plane's weight: one not timed again since it came back has an
        # even delay weight (``reset``), and its cap moves with its outcomes
        # (with a single timed plane left, the caps alone move).
        w, cap, dw = self.weight, self.cap, self.dw
        for p in range(len(w)):
            w[p] = min(dw[p] * (pf[p] if pf is not None else 1.0), cap[p])
        top = max(w[p] for p in live)
        for p in range(len(w)):
            v = w[p] / top
            w[p] = 1.0 if v >= EVEN else max(v, FLOOR)
        self.even = all(x == 1.0 for x in w)

    def _delay_weights(self, live: list[int], elapsed: float) -> list[float]:
        """Move the timed planes' delay weights (``dw``) towards equal
        queueing delays, by their share of a ``HORIZON`` (``elapsed``); the
        proportional factors (``_present``) to multiply them by."""
        # Every move is per HORIZON, scaled by the time since the last
        # update: ``lt`` lags by about a horizon, and a move per update (one
        # slowest RTT, 4 ms on a software host) stacked a dozen moves on one
        # stale reading: the half-rate plane's share swung 0.06-0.75 in
        # ~400 ms cycles (0.87 of capacity; ideal fixed shares 1.00).
        a = min(1.0, elapsed / HORIZON)
        lt, dw = self.lt, self.dw
        for p in live:
            lt[p] += a * (self.qdelay[p] - lt[p])
        qd = lt
        mean = sum(qd[p] for p in live) / len(live)
        m = max(self.margin, min(self.base[p] for p in live))
        # Shares move only while some plane has room (far less queue than
        # another): when every plane queues alike, they are all busy (say an
        # incast into this receiver), and moving load would only make every
        # sender chase the same plane; that is the window controller's business.
        room = min(qd[p] for p in live) + m < ROOM * (max(qd[p] for p in live) + m)
        pull, step, gain = PULL * a, STEP ** a, GAIN * a
        for p in live:
            q = max(qd[p], 0.0)
            # Within one base RTT of the mean is noise (or no queue at all, an
            # application-limited sender): only the pull towards even acts.
            ratio = 1.0 if not room or abs(q - mean) < m else (mean + m) / (q + m)
            dw[p] = dw[p] ** (1 - pull) * min(max(ratio ** gain, 1 / step), step)
        top = max(dw[p] for p in live)
        for p in live:
            dw[p] /= top
        return self._present(live, elapsed, room, mean, m)

    def _present(self, live: list[int], elapsed: float, room: bool, lmean: float,
                 m: float) -> list[float]:
        """A factor per plane from its present queueing delay against the
        planes' mean: the proportional part of the share, beside the delay
        weights' integral; only with ``room`` (the averages' rule) and where
        the present delay is on the side of the mean its average
        (``lmean``: the mean of the averages) is on."""
        a = min(1.0, elapsed / PHORIZON)
        q, lt = self.mt, self.lt
        for p in live:
            q[p] += a * (self.qdelay[p] - q[p])
        out = [1.0] * len(q)
        if not room:
            return out
        mean = sum(max(q[p], 0.0) for p in live) / len(live)
        for p in live:
            if (q[p] > mean) != (lt[p] > lmean):
                continue
            r = (mean + m) / (max(q[p], 0.0) + m)
            out[p] = min(max(r ** PGAIN, 1 / PSTEP), PSTEP)
        return out

    def _loss_caps(self) -> None:
        """Average each plane's loss fraction; cap the weight of a plane that
        loses much more than the other planes that deliver."""
        lf, cap = self.lf, self.cap
        planes = range(len(lf))
        # Only a plane that delivers is a reference: one that has just died
        # declares its losses late (silence, not SACK gaps) and would look
        # like the least lossy, capping a gray survivor in favour of the dead.
        delivering = [p for p in planes if self.acked[p] > 0]
        for p in planes:
            n = self.lost[p] + self.acked[p]
            if n >= LOSS_SAMPLES:
                a = min(1.0, n / LOSS_MEMORY)
                lf[p] += a * (self.lost[p] / n - lf[p])
                self.unit[p] = a / n
                self.lost[p] = self.acked[p] = 0
        if not delivering:
            return
        total = sum(lf[p] for p in delivering)
        for p in planes:
            # Against the mean of the other delivering planes, not the least
            # lossy one: the least of several noisy estimates is biased low,
            # and equal 5% loss everywhere capped planes by turns (0.88 ->
            # 0.84 of capacity in the simulated fabric).
            others = [q for q in delivering if q != p]
            if not others:
                continue
            excess = lf[p] - (total - (lf[p] if p in delivering else 0.0)) / len(others)
            cap[p] = _loss_cap(excess)

    def choose(self, eligible: list[bool]) -> int | None:
        """The plane of the next packet among ``eligible`` ones (smooth
        weighted round robin: shares hold at every time scale, not only
        on average); None when none is."""
        best = -1
        total = 0.0
        credit, w = self.credit, self.weight
        for p, ok in enumerate(eligible):
            if ok:
                credit[p] += w[p]
                total += w[p]
                if best < 0 or credit[p] > credit[best]:
                    best = p
        if best < 0:
            return None
        credit[best] -= total
        self._eligible = eligible
        return best

    def charge(self, plane: int, n: int) -> None:
        """``n`` more packets (negative: fewer) went to ``plane`` than the one
        ``choose`` counted: a spray run is one choice of k packets, and the
        shares are shares of packets, not of choices (runs end with each
        burst, so their lengths vary)."""
        el = self._eligible
        if el is None or not n or not 0 <= plane < len(el):
            return
        credit, w = self.credit, self.weight
        total = 0.0
        for p, ok in enumerate(el):
            if ok:
                credit[p] += w[p] * n
                total += w[p] * n
        credit[plane] -= total

    def snapshot(self) -> dict[str, list[float]]:
        return {"weight": list(self.weight), "qdelay": list(self.qdelay),
                "loss": list(self.lf)}
