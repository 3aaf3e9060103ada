"""The EV set: ``planes`` x ``evs_per_plane`` EVs, their health and probing.

Applies the EV state table of ``transport/ev_state.py``; the core state is in
``ev_core.py``, plane liveness in ``liveness.py``, probing in ``probes.py``.
"""

from __future__ import annotations

from typing import Any

from transport.ev_state import Ev, EvEvent, EvState, PlaneState
from transport.paths.ev_core import ASSUMED_BAD, GOOD, LATE_RTTS, EvWatcher
from transport.paths.probes import EvProbes


class EvSet(EvProbes):
    """``planes`` x ``evs_per_plane`` EVs with distinct values, health and probing.

    ``seed`` makes the EV values (and the policies' rotations) reproducible
    per connection. Times are seconds: ``base_rtt`` scales the defaults of
    ``probe_initial`` (4 x base_rtt, first probe after an EV goes bad) and
    ``probe_max`` (64 x base_rtt, the backoff cap).

    A plane is parked when ``plane_bad_fraction`` (2/3) of its non-denied EVs
    are ASSUMED_BAD (a dead plane goes bad EV after EV under spraying; 1/2
    parked a two-spine plane whose one spine rebooted, when its other spine
    could carry the plane's whole rate), or when it is *silent*: a packet
    sent on it after its newest answered one was declared lost, and its
    oldest unanswered send is
    ``plane_silence`` old. Time since an unanswered send (not since anything
    was last heard, which counts idle time and late answers to older
    packets) makes the rule independent of traffic volume: one packet in
    flight is evidence enough: ``plane_silent_sends`` unanswered sends park
    the plane at once, fewer only after a probe of it failed (one lost SACK
    leaves several sends unanswered). ``plane_silence`` defaults to 3 measured
    smoothed RTTs plus the ACK delay (``set_rtt``; 3 x base_rtt before any
    sample); a number fixes it. The last plane still up is never parked on
    this evidence alone: it is probed (``plane_probe_evs`` probes) and parked
    only if none is answered within ``plane_silence``. A parked plane is
    probed through ``plane_probe_evs`` EVs at a time. A caller that records
    no sends (``on_sent``) gets the older rule: ``plane_loss_evs`` distinct
    EVs lost packets and nothing was heard for ``plane_silence`` (a
    distinct-EV count alone makes a plane with little in flight wait for
    many timeouts, which is why the connection records its sends).
    """

    # -- feedback ----------------------------------------------------------------

    def on_ack(self, ev: Ev, now: float, ecn: bool, rtt: float | None,
               sent: float | None = None) -> None:
        ev.acked += 1
        ev.last_acked = now
        self._heard(ev, now, sent)
        if ecn:
            ev.ecn_marks += 1
            self._apply(ev, EvEvent.ECN_ACK)
        elif ev.skip_strikes and ev.state is GOOD:
            ev.skip_strikes = 0
        for w in self.watchers:
            w.acked(ev, now, 1, ecn)

    def on_acks(self, ev: Ev, now: float, n: int, rtt: float | None, sent: float) -> None:
        """``on_ack`` (no ECN mark) for ``n`` packets of ``ev``, the newest
        sent at ``sent``, ``rtt`` the one sample among them: without a mark
        nothing here depends on the order, and hearing the newest send is
        what hearing each does."""
        ev.acked += n
        ev.last_acked = now
        self._heard(ev, now, sent)
        if ev.skip_strikes and ev.state is GOOD:
            ev.skip_strikes = 0
        for w in self.watchers:
            w.acked(ev, now, n, False)

    def on_trim(self, ev: Ev, now: float, last_hop: bool, sent: float | None = None) -> None:
        # The trimmed header crossed the plane and the NACK came back: the
        # plane forwards, whatever the EV's queue looks like.
        self._heard(ev, now, sent)
        if last_hop:
            ev.last_hop_trims += 1
            self._apply(ev, EvEvent.LAST_HOP_TRIM)
        else:
            ev.trims += 1
            self._apply(ev, EvEvent.FABRIC_TRIM)
        for w in self.watchers:
            w.trimmed(ev, now, last_hop)

    def on_loss(self, ev: Ev, now: float, sent: float | None = None) -> None:
        """Strong evidence against ``ev`` (it goes ASSUMED_BAD); the loss of a
        packet sent at ``sent`` (None: ``now``) also counts for its plane."""
        ev.losses += 1
        plane = self._planes[ev.plane]
        if self._apply(ev, EvEvent.LOSS) and plane.state is PlaneState.UP:
            self._start_probing(ev, now, self.probe_initial)
        self._plane_loss(ev, now, now if sent is None else sent)
        for w in self.watchers:
            w.lost(ev, now, True)

    def on_plane_loss(self, ev: Ev, now: float, sent: float) -> None:
        """A packet sent on ``ev`` at ``sent`` was declared lost. Too weak to
        condemn the EV (one loss is noise), but every loss is evidence about
        the plane: with the time since its oldest unanswered send, it parks
        a dead plane however little is in flight."""
        self._plane_loss(ev, now, sent)
        for w in self.watchers:
            w.lost(ev, now, False)

    def on_late_plane(self, plane: int) -> None:
        """A packet declared lost on ``plane`` was acknowledged after all (an
        earlier copy was only late): nothing to undo in the EV states; the
        policy's plane shares take the loss back."""
        for w in self.watchers:
            w.late(plane)

    def on_plane_rtt(self, plane: int, rtt: float, now: float) -> None:
        """A round trip through ``plane`` (a SACK's echo), for a policy that
        weighs planes; the plane's RTT itself is the ``PathModel``'s (the
        sender feeds it). The plane is the peer's echo: one this set does not
        have is ignored (a hostile or confused peer must not index past it)."""
        if not 0 <= plane < len(self._planes):
            return
        for w in self.watchers:
            w.plane_rtt(plane, rtt, now)

    def on_plane_base(self, plane: int, rtt: float) -> None:
        """A round trip through ``plane`` that skipped its data queue (a
        trimmed header's): a base RTT sample for a policy that weighs planes.
        A plane this set does not have is ignored, as in ``on_plane_rtt``."""
        if not 0 <= plane < len(self._planes) or rtt <= 0:
            return
        for w in self.watchers:
            w.plane_base(plane, rtt)

    def watch(self, watcher: EvWatcher) -> None:
        self.watchers.append(watcher)

    def on_late(self, ev: Ev, now: float, rtt: float | None = None) -> None:
        """A packet declared lost on ``ev`` was acknowledged after all; its
        copy's round trip ``rtt`` if the SACK timed it. A copy more than
        ``LATE_RTTS`` smoothed RTTs late (half that on an EV already condemned
        for such losses) went through a standing queue, not a reordering:
        the EV is skipped, and each such skip doubles the next one. An
        ASSUMED_BAD EV is skipped rather than probed back to GOOD: a probe
        rides the control queue past the standing data queue, so its answer
        would put the slow path straight back into the rotation. An untimed
        late ACK changes nothing (reordering between paths looks the same),
        nor does a copy less than ``late_floor`` beyond the srtt (the host's
        own scheduling)."""
        if rtt is None:
            return
        limit = LATE_RTTS / 2 if ev.state is ASSUMED_BAD else LATE_RTTS
        if rtt > max(limit * self.srtt, self.srtt + self.late_floor) and \
                self._apply(ev, EvEvent.LATE_ACK):
            ev.skip_strikes += 1

    def deny(self, ev: Ev) -> None:
        due = ev.next_probe
        self._apply(ev, EvEvent.DENY)
        self._stop_probing(ev)
        plane = self._planes[ev.plane]
        if due is not None and plane.state is PlaneState.PARKED:
            # Its probe slot goes to another EV of the plane, same schedule.
            self._next_plane_prober(plane, due, ev.probe_interval)

    def allow(self, ev: Ev) -> None:
        plane = self._planes[ev.plane]
        if self._apply(ev, EvEvent.ALLOW) and plane.state is PlaneState.PARKED:
            # Allowed into a parked plane: it waits for the plane like the rest.
            self._apply(ev, EvEvent.PLANE_DOWN)
            if not any(e.index in self._probing for e in plane.evs):
                # The plane had no EV left to probe (all denied): probe this
                # one on the schedule the plane started with.
                self._next_plane_prober(
                    plane, plane.parked_at + self.probe_initial, self.probe_initial
                )

    # -- stats -------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        planes = []
        for plane in self._planes:
            row: dict[str, Any] = {
                "plane": plane.index,
                "state": plane.state.value,
                "evs": len(plane.evs),
                "parks": plane.parks,
                "srtt": self.plane_srtt(plane),
            }
            for s in EvState:
                row[s.value] = sum(1 for ev in plane.evs if ev.state is s)
            for key in (
                "sent",
                "acked",
                "ecn_marks",
                "trims",
                "last_hop_trims",
                "losses",
                "probes_sent",
            ):
                row[key] = sum(getattr(ev, key) for ev in plane.evs)
            planes.append(row)
        return {
            "states": {s.value: n for s, n in self.counts.items()},
            "planes": planes,
            "evs": [ev.as_dict() | {"srtt": self.model.ev_rtt(ev.plane, ev.value)}
                    for ev in self.evs],
        }
