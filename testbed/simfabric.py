"""Stable import path for the simulated fabric; the code lives in :mod:`testbed.sim`."""

from testbed.sim import (
    DROP_REASONS,
    LINK_KINDS,
    Endpoint,
    EventBudgetExceeded,
    Fabric,
    FabricSpec,
    Link,
    LinkKind,
    LinkSpec,
    Packet,
    Simulator,
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
