"""Per-connection congestion control: pure, sans-I/O, clock-free.

``congestion.get("nscc", mtu=..., base_rtt=..., line_rate=...)`` returns a
controller the connection core drives with ``AckSample`` records.
"""

from congestion.base import AckSample, CongestionController
from congestion.fixed import FixedWindow
from congestion.nscc import Nscc
from congestion.nscc_params import NsccParams
from congestion.pacing import Pacer
from congestion.registry import DEFAULT, get, names, register

__all__ = [
    "DEFAULT",
    "AckSample",
    "CongestionController",
    "FixedWindow",
    "Nscc",
    "NsccParams",
    "Pacer",
    "get",
    "names",
    "register",
]
