"""Named connection profiles (transport/config.py): what the daemon and the
simulator start from, and nothing imports the daemon for them."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.sim import scenarios_cc as cc
from testbed.sim.scenarios import default_config, make_fabric
from transport.config import PROFILES, ConnectionConfig, profile, profile_values
from transport.daemon import ConfigError, parse_config
from transport.endpoint import Endpoint

REPO = Path(__file__).resolve().parents[2]


def test_profiles_are_configs_with_their_values() -> None:
    host = profile("host")
    assert isinstance(host, ConnectionConfig)
    assert (host.ack_every, host.min_rto, host.spray_run) == (32, 40e-3, 8)
    assert host.congestion_params == {"burst_packets": 64, "target_delay": 2e-3}
    assert profile("fabric").evs_per_plane == 16
    assert profile("host", ack_every=4, planes=2).ack_every == 4
    with pytest.raises(KeyError, match="host"):
        profile("no-such-profile")
    with pytest.raises(TypeError):
        profile("host", no_such_field=1)


def test_the_host_paces_under_its_wire_line_rate() -> None:
    # plane_rate counts the wire: a 1368-byte payload is a 1514-byte frame
    # (IPv6), and the host paces at 99% of that.
    host = profile("host")
    assert (host.frame_overhead, host.pace_headroom) == (146, 0.99)
    assert host.pace_share() == pytest.approx(1368 / 1514 * 0.99)
    assert profile("host", pace_headroom=1.0).pace_share() == pytest.approx(1368 / 1514)
    assert profile("fabric").pace_share() == 1.0  # the simulated fabric's calibration
    conn_cc = Endpoint(config=profile("host", plane_rate=12.5e6, planes=2),
                       secret=b"s" * 32).connect("b", 0.0).cc
    assert conn_cc.pace_share == pytest.approx(host.pace_share())  # type: ignore[attr-defined]
    for bad in ({"frame_overhead": -1}, {"pace_headroom": 0.0}, {"pace_headroom": 1.5}):
        with pytest.raises(ValueError):
            profile("host", **bad)


def test_profile_values_are_copies() -> None:
    values = profile_values("host")
    values["congestion_params"]["target_delay"] = 1.0
    assert PROFILES["host"]["congestion_params"]["target_delay"] == 2e-3
    assert profile("host").congestion_params["target_delay"] == 2e-3


def test_the_daemon_starts_from_the_host_profile_and_checks_its_keys(tmp_path: Path) -> None:
    base = {"name": "h", "planes": ["127.0.0.1"], "socket": "s", "insecure": True}
    # The host profile, and the hold its receive moderation adds to a round
    # trip and the hosts' scheduling (4 x rx_holdoff) told to the controller.
    held = {**PROFILES["host"]["congestion_params"], "host_hold": 4e-3}
    cfg = parse_config(base, "t.toml", tmp_path)
    assert cfg.connection == profile("host", planes=1, congestion_params=held)
    cfg = parse_config({**base, "connection": {"ack_every": 4}}, "t.toml", tmp_path)
    assert cfg.connection == profile("host", planes=1, ack_every=4, congestion_params=held)
    cfg = parse_config({**base, "rx_holdoff_us": 0}, "t.toml", tmp_path)
    assert cfg.connection == profile("host", planes=1)
    with pytest.raises(ConfigError, match=r"connection\.no_such_key"):
        parse_config({**base, "connection": {"no_such_key": 1}}, "t.toml", tmp_path)


def test_the_simulator_uses_the_profiles() -> None:
    fab = make_fabric(planes=2, spines=2)
    assert default_config(fab).evs_per_plane == PROFILES["fabric"]["evs_per_plane"]
    cfg = cc.host_config(cc.testbed_fabric(), plane_rate=cc.PLANE_RATE)
    assert (cfg.ack_every, cfg.min_rto, cfg.congestion_params) == \
        (32, 40e-3, {"burst_packets": 64, "target_delay": 2e-3})


def test_nothing_imports_the_daemon_for_a_default() -> None:
    users = [p for d in ("transport", "tools", "testbed", "tests")
             for p in (REPO / d).rglob("*.py")
             if "HOST_CONNECTION_DEFAULTS" in p.read_text() and p.name != Path(__file__).name]
    assert users == []


def test_the_daemon_takes_a_receive_moderation_and_checks_it(tmp_path: Path) -> None:
    from transport.rx_moderation import RX_HOLDOFF_HOST, RX_POLL_TARGET

    base = {"name": "h", "planes": ["127.0.0.1"], "socket": "s", "insecure": True}
    assert parse_config(base, "t.toml", tmp_path).rx_holdoff == RX_HOLDOFF_HOST
    assert parse_config(base, "t.toml", tmp_path).rx_poll_target == RX_POLL_TARGET
    assert parse_config({**base, "rx_poll_target": 0}, "t.toml", tmp_path).rx_poll_target == 0
    assert parse_config({**base, "rx_holdoff_us": 0}, "t.toml", tmp_path).rx_holdoff == 0
    assert parse_config({**base, "rx_holdoff_us": 500}, "t.toml", tmp_path).rx_holdoff \
        == pytest.approx(500e-6)
    for bad in (-1, 20_000, "fast", True):
        with pytest.raises(ConfigError, match="rx_holdoff_us"):
            parse_config({**base, "rx_holdoff_us": bad}, "t.toml", tmp_path)
    for bad in (-1, 5000, 1.5, "many"):
        with pytest.raises(ConfigError, match="rx_poll_target"):
            parse_config({**base, "rx_poll_target": bad}, "t.toml", tmp_path)


def test_congestion_params_go_over_the_profiles_and_are_checked(tmp_path: Path) -> None:
    # One switch named in [connection.congestion_params] keeps the profile's
    # pacing burst and target delay; a misspelt key fails at load, named.
    base = {"name": "h", "planes": ["127.0.0.1"], "socket": "s", "insecure": True}
    cfg = parse_config({**base, "connection": {"congestion_params": {"host_floor": True}}},
                       "t.toml", tmp_path)
    assert cfg.connection.congestion_params == {"burst_packets": 64, "target_delay": 2e-3,
                                                "host_floor": True, "host_hold": 4e-3}
    cfg = parse_config({**base, "connection": {"congestion_params": {"target_delay": 1e-3}}},
                       "t.toml", tmp_path)
    assert cfg.connection.congestion_params["target_delay"] == 1e-3
    for bad, why in (({"host_flor": True}, "host_flor"), ("x", "a table")):
        with pytest.raises(ConfigError, match=why):
            parse_config({**base, "connection": {"congestion_params": bad}}, "t.toml", tmp_path)
    with pytest.raises(ConfigError, match="unknown congestion controller"):
        parse_config({**base, "connection": {"congestion": "cubic",
                                             "congestion_params": {}}}, "t.toml", tmp_path)


def test_the_controller_is_told_the_hold_of_the_hosts_polling(tmp_path: Path) -> None:
    # Up to one poll interval (rx_holdoff) at each end is the hosts' share of
    # a round trip, not a queue, and the hosts' scheduling as much again:
    # NSCC reads 4 x rx_holdoff as such (host_hold). A value
    # in the table wins; no moderation, or a controller that does not read
    # it, gets none.
    base = {"name": "h", "planes": ["127.0.0.1"], "socket": "s", "insecure": True}

    def hold(**kw: object) -> object:
        cfg = parse_config({**base, **kw}, "t.toml", tmp_path)
        return cfg.connection.congestion_params.get("host_hold")

    assert hold() == pytest.approx(4e-3)
    assert hold(rx_holdoff_us=300) == pytest.approx(1.2e-3)
    assert hold(rx_holdoff_us=0) is None
    assert hold(connection={"congestion_params": {"host_hold": 0.0}}) == 0.0
    assert hold(connection={"congestion": "nscc-uec"}) == pytest.approx(4e-3)
    assert hold(connection={"congestion": "fixed"}) is None
