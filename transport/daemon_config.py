"""``braid daemon``'s configuration: the TOML file (``load_config``), its
checks (errors name the file, the key and, for syntax errors, the line) and
the cluster key (``load_secret``). ``[connection]`` starts from the ``host``
connection profile (``transport.config.PROFILES``); its keys are the fields
of ``ConnectionConfig``.
"""

from __future__ import annotations

import socket
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from transport.config import ConnectionConfig, profile_values
from transport.rx_moderation import RX_HOLDOFF_HOST, RX_POLL_TARGET
from transport.udp import PlaneAddr, parse_addr, path_mtu, payload_for_mtu
from wire.constants import UDP_PORT
from wire.keys import KeyFileError, load_key_file

#: Largest MTU the automatic payload follows (loopback's 64 KiB is no fabric).
MAX_AUTO_MTU = 9000


def auto_payload(planes: list[PlaneAddr], peers: dict[str, list[PlaneAddr]]) -> int | None:
    """The DATA payload that fits every plane's path MTU to every configured
    peer, up to a 9000-byte MTU (the testbed's default links: 8888 over IPv4,
    8868 over IPv6; loopback counts as 9000); None without peers or
    routes (the configured default, sized for 1500, stays). Only the first
    hop's MTU is known before traffic flows: give links of one plane one MTU."""
    sizes = [payload_for_mtu(min(mtu, MAX_AUTO_MTU), v6=local.family == socket.AF_INET6)
             for addrs in peers.values() for local, remote in zip(planes, addrs, strict=False)
             if (mtu := path_mtu(local, remote)) is not None]
    if not sizes:
        return None
    return max(64, min(sizes))


class ConfigError(ValueError):
    """A daemon configuration the user must fix (message names file and key)."""


class DaemonError(RuntimeError):
    """The daemon cannot start (port in use, socket path taken, ...)."""


@dataclass
class DaemonConfig:
    name: str
    planes: list[PlaneAddr]
    peers: dict[str, list[PlaneAddr]]
    socket_path: Path
    key_file: Path | None
    connection: ConnectionConfig
    pool: int = 16
    rcvbuf: int = 32 << 20
    sndbuf: int = 8 << 20
    drain_timeout: float = 10.0
    send_window: int = 64 << 20
    recv_buffer: int = 512 << 20
    source: str = "<config>"
    #: Append per-connection traffic keys here (``wire.keylog``), mode 0600.
    keylog: Path | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: No payload_size configured: size DATA to the path MTU towards the
    #: configured peers (jumbo links give jumbo payloads), see ``auto_payload``.
    payload_auto: bool = False
    #: Measure how long datagrams wait in the plane sockets' queues before the
    #: daemon reads them (kernel receive timestamps; transport/queue_wait.py).
    queue_wait: bool = False
    #: Kernel receive timestamps tell the transport how long each datagram
    #: waited in this host before it was read: taken out of RTT samples and
    #: covered by the window instead (docs/congestion.md, "Host delay"; off:
    #: on the tail-drop testbed it cost ~2% of goodput and moved no bin).
    host_stamps: bool = False
    #: Receive moderation: the longest poll interval, seconds (0: off), and
    #: the datagrams per poll the interval adapts to (0: fixed at
    #: ``rx_holdoff``); ``transport.rx_moderation.RX_HOLDOFF_HOST``, ``RX_POLL_TARGET``.
    rx_holdoff: float = RX_HOLDOFF_HOST
    rx_poll_target: int = RX_POLL_TARGET


def _want(src: str, key: str, value: object, kind: type | tuple[type, ...], what: str) -> Any:
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
        raise ConfigError(f"{src}: key '{key}': expected {what}, got {value!r}")
    return value


def _congestion_params(src: str, conn_user: dict[str, Any]) -> dict[str, Any]:
    """``[connection.congestion_params]``: single keys over the profile's
    (a table that named one switch, say ``host_floor = true``, must not drop
    the profile's pacing burst and target delay), checked by building the
    controller, so a misspelt key fails here, with its name, and not at the
    first connection."""
    from congestion.registry import check

    table = _want(src, "connection.congestion_params", conn_user["congestion_params"], dict,
                  "a table of the congestion controller's parameters")
    base = profile_values("host")
    default = ConnectionConfig().congestion
    name = conn_user.get("congestion", base.get("congestion", default))
    merged = {**base.get("congestion_params", {}), **table} if name == default else dict(table)
    try:
        check(str(name), merged)
    except KeyError as exc:
        raise ConfigError(f"{src}: key 'connection.congestion': {exc.args[0]}") from None
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{src}: table 'connection.congestion_params': {exc}") from None
    return merged


#: ``congestion_params.host_hold`` in poll intervals (``rx_holdoff``): one
#: at each end for the polling, as much again for the hosts' scheduling
#: lateness on a busy host (decision 0030).
HOLD_POLLS = 4
#: The controllers that read ``congestion_params.host_hold``.
_HOLD_READERS = frozenset({"nscc", "nscc-uec"})


def _hold_for_moderation(cfg: DaemonConfig, conn_user: dict[str, Any]) -> None:
    """Receive moderation polls each end's sockets every ``rx_holdoff`` at
    most, so a DATA packet may wait that long to be read and its SACK as
    long again: up to 2 x ``rx_holdoff`` of every round trip is the hosts',
    not a queue, and a busy host's scheduler adds as much again. The
    controller is told ``HOLD_POLLS`` x ``rx_holdoff``
    (``congestion_params.host_hold``), unless the table sets it. (On plain
    tail-drop links a 2 ms target read through 1 ms polls at both ends left
    the bottleneck's queue empty in a quarter of the samples; with 2 ms of
    hold, 4-5% of 10 ms bins fell below 90% of the links' rate, with 4 ms
    0-0.8%: docs/congestion.md, "Plain tail-drop links".)"""
    conn = cfg.connection
    params = conn.congestion_params
    user = conn_user.get("congestion_params", {})
    if cfg.rx_holdoff <= 0 or conn.congestion not in _HOLD_READERS or \
            not isinstance(user, dict) or "host_hold" in user:
        return
    cfg.connection = replace(conn, congestion_params={**params,
                                                      "host_hold": HOLD_POLLS * cfg.rx_holdoff})


def _addrs(src: str, key: str, value: object, port: int) -> list[PlaneAddr]:
    items = _want(src, key, value, list, "a list of addresses, one per plane")
    if not items:
        raise ConfigError(f"{src}: key '{key}': needs at least one plane address")
    out = []
    for i, item in enumerate(items):
        _want(src, f"{key}[{i}]", item, str, "an address string like '10.0.0.1' or '10.0.0.1:4747'")
        try:
            out.append(parse_addr(item, port))
        except ValueError as exc:
            raise ConfigError(f"{src}: key '{key}[{i}]': {exc}") from None
    return out


_TOP_KEYS = {"name", "port", "key", "socket", "planes", "peers", "connection", "pool", "rcvbuf",
             "sndbuf", "drain_timeout", "send_window", "recv_buffer", "insecure", "keylog",
             "queue_wait", "host_stamps", "rx_holdoff_us", "rx_poll_target"}


def parse_config(data: dict[str, Any], src: str, base: Path) -> DaemonConfig:
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        known = ", ".join(sorted(_TOP_KEYS))
        raise ConfigError(f"{src}: unknown key '{unknown[0]}' (known: {known})")
    for k in ("name", "planes", "socket"):
        if k not in data:
            raise ConfigError(f"{src}: missing key '{k}'")
    name = _want(src, "name", data["name"], str, "a string")
    port = _want(src, "port", data.get("port", UDP_PORT), int, "an integer")
    if not 0 < port < 65536:
        raise ConfigError(f"{src}: key 'port': {port} is not a UDP port")
    planes = _addrs(src, "planes", data["planes"], port)
    peers_raw = _want(src, "peers", data.get("peers", {}), dict, "a table of peers")
    peers: dict[str, list[PlaneAddr]] = {}
    for pname, pdata in peers_raw.items():
        _want(src, f"peers.{pname}", pdata, dict, "a table with 'planes'")
        if "planes" not in pdata:
            raise ConfigError(f"{src}: missing key 'peers.{pname}.planes'")
        extra = sorted(set(pdata) - {"planes"})
        if extra:
            raise ConfigError(f"{src}: unknown key 'peers.{pname}.{extra[0]}'")
        addrs = _addrs(src, f"peers.{pname}.planes", pdata["planes"], port)
        if len(addrs) != len(planes):
            raise ConfigError(f"{src}: key 'peers.{pname}.planes': {len(addrs)} addresses, "
                              f"but this host has {len(planes)} planes")
        peers[pname] = addrs
    insecure = _want(src, "insecure", data.get("insecure", False), bool, "true or false")
    key_file: Path | None = None
    if "key" in data:
        key_file = base / _want(src, "key", data["key"], str, "a file name")
    elif not insecure:
        raise ConfigError(f"{src}: missing key 'key' (the cluster key file from 'braid keygen'; "
                          f"or insecure = true for plaintext)")
    sock = base / _want(src, "socket", data["socket"], str, "a path")
    conn_raw = profile_values("host")
    conn_user = _want(src, "connection", data.get("connection", {}), dict, "a table")
    conn_raw.update(conn_user)
    if "congestion_params" in conn_user:
        conn_raw["congestion_params"] = _congestion_params(src, conn_user)
    names = {f.name for f in fields(ConnectionConfig)}
    bad = sorted(set(conn_raw) - names)
    if bad:
        raise ConfigError(f"{src}: unknown key 'connection.{bad[0]}'")
    if conn_raw.setdefault("planes", len(planes)) != len(planes):
        raise ConfigError(f"{src}: key 'connection.planes' disagrees with the {len(planes)} "
                          f"plane addresses")
    try:
        conn_cfg = ConnectionConfig(**conn_raw)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{src}: table 'connection': {exc}") from None
    cfg = DaemonConfig(name=name, planes=planes, peers=peers, socket_path=sock,
                       key_file=key_file, connection=conn_cfg, source=src,
                       payload_auto="payload_size" not in data.get("connection", {}))
    for k in ("pool", "rcvbuf", "sndbuf", "send_window", "recv_buffer"):
        if k in data:
            v = _want(src, k, data[k], int, "an integer")
            if v < (0 if k == "pool" else 1):
                raise ConfigError(f"{src}: key '{k}': must be positive")
            setattr(cfg, k, v)
    cfg.queue_wait = _want(src, "queue_wait", data.get("queue_wait", False), bool,
                           "true or false")
    cfg.host_stamps = _want(src, "host_stamps", data.get("host_stamps", False), bool,
                            "true or false")
    if "rx_holdoff_us" in data:
        us = _want(src, "rx_holdoff_us", data["rx_holdoff_us"], (int, float), "microseconds")
        if not 0 <= us <= 10_000:
            raise ConfigError(f"{src}: key 'rx_holdoff_us': takes 0..10000 (0: off)")
        cfg.rx_holdoff = us * 1e-6
    _hold_for_moderation(cfg, conn_user)
    if "rx_poll_target" in data:
        n = _want(src, "rx_poll_target", data["rx_poll_target"], int, "an integer")
        if not 0 <= n <= 4096:
            raise ConfigError(f"{src}: key 'rx_poll_target': takes 0..4096 "
                              "(0: a fixed poll interval)")
        cfg.rx_poll_target = n
    if "keylog" in data:
        cfg.keylog = base / _want(src, "keylog", data["keylog"], str, "a file name")
    if "drain_timeout" in data:
        cfg.drain_timeout = float(_want(src, "drain_timeout", data["drain_timeout"],
                                        (int, float), "seconds"))
    return cfg


def load_config(path: str | Path) -> DaemonConfig:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ConfigError(f"{p}: {exc.strerror}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{p}: invalid TOML: {exc}") from None  # names line and column
    return parse_config(data, str(p), p.resolve().parent)


def load_secret(cfg: DaemonConfig) -> bytes | None:
    if cfg.key_file is None:
        return None
    try:
        return load_key_file(cfg.key_file, owner_only=True)
    except KeyFileError as exc:
        raise ConfigError(f"{cfg.source}: key 'key': {exc}") from None
