"""Multi-plane namespace fabrics with trimming switch ports and faults.

``from testbed import Testbed`` (imported lazily, so ``testbed.sim`` users do
not pay for pyroute2). See docs/testbed.md.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Testbed"]


def __getattr__(name: str) -> Any:
    if name == "Testbed":
        from testbed.fabric import Testbed

        return Testbed
    raise AttributeError(f"module 'testbed' has no attribute {name!r}")
