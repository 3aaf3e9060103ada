"""Congestion controllers by name, like aioquic's ``register_congestion_control``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from congestion.base import CongestionController
from congestion.fixed import FixedWindow
from congestion.nscc import Nscc
from congestion.nscc_params import NsccParams

Factory = Callable[..., CongestionController]

DEFAULT = "nscc"

_REGISTRY: dict[str, Factory] = {}
#: Controllers whose factory takes the connection's link: ``mtu`` (the DATA
#: payload), ``base_rtt`` (the first RTT guess) and ``line_rate`` (bytes/s
#: over all planes).
_TAKES_LINK: set[str] = set()


def register(name: str, factory: Factory, *, takes_link: bool = False) -> None:
    """Make ``factory(**params)`` available as ``get(name, **params)``; with
    ``takes_link`` a connection also passes its link (``for_connection``)."""
    _REGISTRY[name] = factory
    if takes_link:
        _TAKES_LINK.add(name)
    else:
        _TAKES_LINK.discard(name)


def names() -> list[str]:
    return sorted(_REGISTRY)


def get(name: str = DEFAULT, **params: Any) -> CongestionController:
    """A new controller; unknown names raise KeyError listing the known ones."""
    try:
        factory = _REGISTRY[name]
    except KeyError:
        raise KeyError(
            f"unknown congestion controller {name!r}; known: {', '.join(names())}"
        ) from None
    return factory(**params)


def for_connection(name: str, *, mtu: int, base_rtt: float, line_rate: float,
                   params: Mapping[str, Any]) -> CongestionController:
    """The controller a connection runs: its link, if the controller takes
    one, under the configured ``params`` (which win)."""
    link: dict[str, Any] = {}
    if name in _TAKES_LINK:
        link = {"mtu": mtu, "base_rtt": base_rtt, "line_rate": line_rate}
    return get(name, **{**link, **params})


def _nscc_uec(**params: Any) -> CongestionController:
    return Nscc(NsccParams.uec_spec(), **params)


register("nscc", Nscc, takes_link=True)
register("nscc-uec", _nscc_uec, takes_link=True)
register("fixed", FixedWindow)
