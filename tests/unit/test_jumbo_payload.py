"""DATA payloads sized to the path MTU: jumbo links give jumbo payloads."""

from __future__ import annotations

from pathlib import Path

from transport.config import ConnectionConfig
from transport.daemon import auto_payload, parse_config
from transport.udp import PlaneAddr, path_mtu, payload_for_mtu


def test_payload_for_mtu_matches_the_1500_default_and_jumbo() -> None:
    assert payload_for_mtu(1500, v6=True) == ConnectionConfig().payload_size == 1368
    assert payload_for_mtu(9000, v6=False) == 8888
    assert payload_for_mtu(9000, v6=True) == 8868


def test_auto_payload_follows_the_route_capped_at_jumbo() -> None:
    local = [PlaneAddr("127.0.0.1", 4747)]
    mtu = path_mtu(local[0], PlaneAddr("127.0.0.2", 4747))
    assert mtu is not None and mtu > 9000  # loopback
    assert auto_payload(local, {"b": [PlaneAddr("127.0.0.2", 4747)]}) == 8888
    # No peers to ask about: the configured default stays.
    assert auto_payload(local, {}) is None


def _config(connection: dict[str, object]) -> dict[str, object]:
    return {"name": "a", "planes": ["127.0.0.1"], "socket": "a.sock", "insecure": True,
            "peers": {"b": {"planes": ["127.0.0.2"]}}, "connection": connection}


def test_explicit_payload_size_is_kept() -> None:
    auto = parse_config(_config({}), "t.toml", Path("/tmp"))
    assert auto.payload_auto
    fixed = parse_config(_config({"payload_size": 1368}), "t.toml", Path("/tmp"))
    assert not fixed.payload_auto and fixed.connection.payload_size == 1368
