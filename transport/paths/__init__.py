"""Paths: the EV set, its health and probing, and the policies that pick EVs.

Sans-I/O and clock-free: every call carries ``now`` (seconds, the caller's
clock). The connection core holds one ``PathPolicy`` (``get_policy("spray")``),
asks it for an EV per packet (``next_ev``) and feeds back what happened on
each EV (``on_ack``, ``on_trim``, ``on_loss``, probe calls). Every policy
owns (or shares) one ``EvSet`` (``ev_set.py``), which applies the EV state
table of ``transport/ev_state.py``, schedules probes and parks whole planes;
policies differ only in how they pick.

Modules, bottom up: ``ev_core`` (the set's planes and EVs, the table
applied), ``liveness`` (silent planes, parking), ``probes``, ``ev_set``
(feedback), ``rotation``, ``policy`` (interface, registry), ``policies``.
"""

from __future__ import annotations

from transport.ev_state import Ev, EvState, PlaneState
from transport.paths.ev_set import EvSet
from transport.paths.policies import ObliviousPolicy, RepsPolicy, SinglePolicy, SprayPolicy
from transport.paths.policy import (
    DEFAULT_POLICY,
    PathPolicy,
    get_policy,
    policy_names,
    register_policy,
)

__all__ = [
    "DEFAULT_POLICY",
    "Ev",
    "EvSet",
    "EvState",
    "ObliviousPolicy",
    "PathPolicy",
    "PlaneState",
    "RepsPolicy",
    "SinglePolicy",
    "SprayPolicy",
    "get_policy",
    "policy_names",
    "register_policy",
]
