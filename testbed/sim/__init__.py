"""Deterministic, seeded, virtual-time multi-plane fabric simulator.

See :mod:`testbed.sim.fabric` (topology, link elements, counters) and
:mod:`testbed.sim.driver` (the event loop that drives sans-I/O endpoints).
"""

from testbed.sim.driver import Endpoint, EventBudgetExceeded, Simulator
from testbed.sim.fabric import (
    DROP_REASONS,
    LINK_KINDS,
    Fabric,
    FabricSpec,
    Link,
    LinkKind,
    LinkSpec,
    Packet,
    TraceFn,
)

__all__ = [
    "DROP_REASONS",
    "LINK_KINDS",
    "Endpoint",
    "EventBudgetExceeded",
    "Fabric",
    "FabricSpec",
    "Link",
    "LinkKind",
    "LinkSpec",
    "Packet",
    "Simulator",
    "TraceFn",
]
