"""Probes: which EVs are due a probe, and what an answer means.

An ASSUMED_BAD EV is probed with backoff; a parked plane through a few
representatives at a time; a plane that looks silent gets liveness probes
(``liveness.py`` decides when).
"""

from __future__ import annotations

import math

from transport.ev_state import Ev, EvEvent, PlaneState
from transport.paths.ev_core import DENIED, GOOD, _Plane
from transport.paths.liveness import PlaneLiveness


class EvProbes(PlaneLiveness):
    """Probe scheduling on top of plane liveness."""

    def due_probes(self, now: float) -> list[Ev]:
        """EVs whose probe is due; also the moment silent planes are parked."""
        ups = self._ups()
        for plane in self._planes:
            deadline = self._plane_deadline(plane, ups)
            if deadline is not None and now >= deadline and not plane.liveness_probes_due:
                self._check_plane(plane, now)
                ups = self._ups()  # it may have parked the plane
        due = [
            ev
            for ev in self._probing.values()
            if ev.next_probe is not None and ev.next_probe <= now
        ]
        for plane in self._planes:
            if plane.liveness_probes_due and plane.state is PlaneState.UP:
                probers = self._liveness_probers(plane, plane.liveness_probes_due)
                if not probers:
                    plane.liveness_probes_due = 0
                due.extend(probers)
        return due

    def _liveness_probers(self, plane: _Plane, n: int) -> list[Ev]:
        """``n`` usable EVs of ``plane`` to carry its liveness probes (GOOD first)."""
        usable = [ev for ev in plane.evs if ev.state is not DENIED]
        usable.sort(key=lambda ev: ev.state is not GOOD)
        return usable[:n]

    def on_probe_sent(self, ev: Ev, now: float) -> None:
        ev.probes_sent += 1
        ev.last_sent = now
        plane = self._planes[ev.plane]
        self.on_sent(ev, now)
        if plane.liveness_probes_due and plane.state is PlaneState.UP:
            plane.liveness_probes_due -= 1
            plane.liveness_round_at = now
            if plane.liveness_probe_at is None:
                plane.liveness_probe_at = now
        if ev.index not in self._probing:
            return
        interval = min(2 * ev.probe_interval, self.probe_max)
        if plane.state is PlaneState.PARKED:
            self._stop_probing(ev)
            self._next_plane_prober(plane, now + interval, interval)
        else:
            ev.probe_interval = interval
            ev.next_probe = now + interval

    def on_probe_ack(self, ev: Ev, now: float, rtt: float | None = None) -> None:
        if rtt is not None:
            self.model.probe_sample(ev.plane, rtt)
        ev.last_acked = now
        plane = self._planes[ev.plane]
        if plane.state is PlaneState.PARKED:
            self._unpark(plane, now, ev)
            # The receiver answered a send of now - rtt: evidence against
            # planes silent since before it.
            if rtt is not None and now - rtt > self._newest_answer:
                self._newest_answer = now - rtt
        else:
            self._heard(ev, now, None if rtt is None else now - rtt)
            self._apply(ev, EvEvent.PROBE_OK)

    def next_timer(self) -> float | None:
        """Earliest probe due or silent-plane check, or None.

        A deadline returned here is tested by ``due_probes`` with the very
        same expression (``now >= deadline``), so a timer never fires without
        effect and re-arms at the same instant (``last + s`` armed but
        ``now - last >= s`` tested differ in floating point and once hung
        the simulator at a fixed virtual time)."""
        t = math.inf
        for ev in self._probing.values():
            if ev.next_probe is not None and ev.next_probe < t:
                t = ev.next_probe
        ups = self._ups()
        for plane in self._planes:
            deadline = self._plane_deadline(plane, ups)
            if deadline is not None and deadline < t:
                t = deadline
        return None if t == math.inf else t
