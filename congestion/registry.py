"""Congestion controllers by name, like aioquic's ``register_congestion_control``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from congestion.base import CongestionController
from congestion.fixed import FixedWindow
from congestion.nscc import Nscc

Factory = Callable[..., CongestionController]

DEFAULT = "nscc"

_REGISTRY: dict[str, Factory] = {}


def register(name: str, factory: Factory) -> None:
    """Make ``factory(**params)`` available as ``get(name, **params)``."""
    _REGISTRY[name] = factory


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


register("nscc", Nscc)
register("fixed", FixedWindow)
