"""Parsing of the quantities used in topology and timeline files.

Rates are in bits per second (tc's spelling: ``100mbit``, ``1gbit``), sizes in
bytes (``64KB`` = 65,536 bytes: K/M/G are powers of 1024, as tc's ``kb``),
durations in seconds (``500ms``, ``50us``, ``2s``), ratios from ``5%`` or
``0.05``. Every parser raises ``ValueError`` with the offending text; the
caller adds the key or line name.
"""

from __future__ import annotations

import re

_NUM = r"(\d+(?:\.\d*)?|\.\d+)"
_RATE_UNITS = {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9, "bps": 8,
               "kbps": 8 * 10**3, "mbps": 8 * 10**6, "gbps": 8 * 10**9}
_SIZE_UNITS = {"": 1, "b": 1, "k": 1024, "kb": 1024, "kib": 1024, "m": 1024**2,
               "mb": 1024**2, "mib": 1024**2, "g": 1024**3, "gb": 1024**3}
_TIME_UNITS = {"": 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


def _split(text: str | int | float, what: str) -> tuple[float, str]:
    if isinstance(text, bool):
        raise ValueError(f"expected a {what}, got {text!r}")
    if isinstance(text, int | float):
        return float(text), ""
    m = re.fullmatch(_NUM + r"\s*([a-zA-Z%]*)", str(text).strip())
    if not m:
        raise ValueError(f"expected a {what}, got {text!r}")
    return float(m.group(1)), m.group(2).lower()


def parse_rate(text: str | int | float) -> int:
    """Bits per second; 0 means unlimited."""
    value, unit = _split(text, "rate like '100mbit'")
    if unit == "" and value == 0:
        return 0
    if unit not in _RATE_UNITS:
        raise ValueError(f"expected a rate like '100mbit', got {text!r}")
    return int(value * _RATE_UNITS[unit])


def parse_size(text: str | int | float) -> int:
    """Bytes."""
    value, unit = _split(text, "size like '64KB'")
    if unit not in _SIZE_UNITS:
        raise ValueError(f"expected a size like '64KB', got {text!r}")
    return int(value * _SIZE_UNITS[unit])


def parse_duration(text: str | int | float) -> float:
    """Seconds (a bare number is seconds)."""
    value, unit = _split(text, "duration like '500ms'")
    if unit not in _TIME_UNITS:
        raise ValueError(f"expected a duration like '500ms', got {text!r}")
    return value * _TIME_UNITS[unit]


def parse_ratio(text: str | int | float) -> float:
    """A probability in [0, 1] from '5%' or 0.05."""
    value, unit = _split(text, "percentage like '5%'")
    if unit == "%":
        value /= 100.0
    elif unit != "":
        raise ValueError(f"expected a percentage like '5%', got {text!r}")
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"expected a percentage between 0% and 100%, got {text!r}")
    return value


def format_rate(bps: int) -> str:
    if bps == 0:
        return "unlimited"
    for unit, scale in (("gbit", 10**9), ("mbit", 10**6), ("kbit", 10**3)):
        if bps >= scale:
            return f"{bps / scale:g}{unit}"
    return f"{bps}bit"
