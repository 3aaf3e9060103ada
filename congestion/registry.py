"""Congestion controllers by name, like aioquic's ``register_congestion_control``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from congestion.base import CongestionController, PlaneRtt
from congestion.fixed import FixedWindow
from congestion.nscc import Nscc
from congestion.nscc_params import NsccParams

Factory = Callable[..., CongestionController]

DEFAULT = "nscc"

_REGISTRY: dict[str, Factory] = {}
#: Controllers whose factory takes the connection's link: ``mtu`` (the DATA
#: payload), ``base_rtt`` (the first RTT guess), ``line_rate`` (bytes/s
#: over all planes) and ``pace_share`` (the share of the line rate its pacer
#: may send payload at: the frame's overhead and a headroom taken off).
_TAKES_LINK: set[str] = set()
#: Controllers whose factory takes the connection's path model (``paths``,
#: a ``congestion.base.PlaneRtt``): they read its per-plane base RTTs.
_TAKES_PATHS: set[str] = set()


def register(name: str, factory: Factory, *, takes_link: bool = False,
             takes_paths: bool = False) -> None:
    """Make ``factory(**params)`` available as ``get(name, **params)``; with
    ``takes_link`` a connection also passes its link, with ``takes_paths``
    its path model (``for_connection``)."""
    _REGISTRY[name] = factory
    for flag, names_ in ((takes_link, _TAKES_LINK), (takes_paths, _TAKES_PATHS)):
        if flag:
            names_.add(name)
        else:
            names_.discard(name)


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
                   params: Mapping[str, Any], pace_share: float = 1.0,
                   paths: PlaneRtt | None = None) -> CongestionController:
    """The controller a connection runs: its link and its path model
    (``paths``, the owner of the per-plane base RTTs), if the controller
    takes them, under the configured ``params`` (which win)."""
    link: dict[str, Any] = {}
    if name in _TAKES_LINK:
        link = {"mtu": mtu, "base_rtt": base_rtt, "line_rate": line_rate,
                "pace_share": pace_share}
    if paths is not None and name in _TAKES_PATHS:
        link["paths"] = paths
    return get(name, **{**link, **params})


def check(name: str, params: Mapping[str, Any]) -> None:
    """Raise what building controller ``name`` under ``params`` raises
    (KeyError: no such controller; TypeError or ValueError: a parameter it
    does not take or refuses), on a nominal link: for configuration checked
    when it is loaded, not at the first connection."""
    for_connection(name, mtu=1500, base_rtt=1e-4, line_rate=1.25e9, params=params)


def _nscc_uec(**params: Any) -> CongestionController:
    return Nscc(NsccParams.uec_spec(), **params)


register("nscc", Nscc, takes_link=True, takes_paths=True)
register("nscc-uec", _nscc_uec, takes_link=True, takes_paths=True)
register("fixed", FixedWindow)
