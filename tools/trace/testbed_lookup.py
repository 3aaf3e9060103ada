"""Where a testbed host's plane interface lives: (namespace, interface).

Kept apart from the capture code on purpose: it reads the running testbed's
run directory (``/run/braid/<name>/state.json``, or ``$BRAID_RUN_DIR``) and
its naming rules (namespace ``<prefix><host>``, host NIC ``p<plane>``), so
when the testbed grows a richer API only this module has to change.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

from tools.common.errors import UserError

_HOST_RE = re.compile(r"h\d+")
_PLANE_IF_RE = re.compile(r"p\d+")


def run_root() -> Path:
    return Path(os.environ.get("BRAID_RUN_DIR", "/run/braid"))


def load_state(testbed: str | None = None) -> dict[str, Any]:
    root = run_root()
    names = sorted(p.parent.name for p in root.glob("*/state.json")) if root.is_dir() else []
    if testbed is None:
        if not names:
            raise UserError(f"no running testbed under {root} (use --netns/--iface instead)")
        if len(names) > 1:
            raise UserError(f"several testbeds are running ({', '.join(names)}): use --testbed")
        testbed = names[0]
    path = root / testbed / "state.json"
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"testbed {testbed!r} is not running (no {path})") from None
    except (OSError, ValueError) as exc:
        raise UserError(f"unreadable testbed state {path}: {exc}") from None
    return data


def _namespaces(state: dict[str, Any]) -> list[str]:
    out = []
    for obj in state.get("objects", []):
        if obj.get("type") in ("netns", "namespace"):
            name = obj.get("name") or obj.get("netns")
            if isinstance(name, str):
                out.append(name)
    return out


def host_namespace(state: dict[str, Any], host: str) -> str:
    prefix = str(state.get("prefix", ""))
    known = _namespaces(state)
    for candidate in (prefix + host, host):
        if candidate in known or Path("/run/netns", candidate).exists():
            return candidate
    raise UserError(f"host {host!r} is not in testbed {state.get('name')!r}")


def host_namespaces(state: dict[str, Any]) -> dict[str, str]:
    """host name -> namespace, for every host (not switch) of the testbed."""
    prefix = str(state.get("prefix", ""))
    out = {}
    for ns in _namespaces(state):
        host = ns[len(prefix):] if ns.startswith(prefix) else ns
        if _HOST_RE.fullmatch(host):
            out[host] = ns
    return dict(sorted(out.items(), key=lambda kv: int(kv[0][1:])))


def plane_interfaces(netns: str, state: dict[str, Any] | None = None) -> list[str]:
    """The plane NICs (``p<N>``) of a namespace: from the recorded veths, else the kernel."""
    recorded = set()
    for obj in (state or {}).get("objects", []):
        if obj.get("type") != "veth":
            continue
        for ns_key, if_key in (("ns", "ifname"), ("peer_ns", "peer")):
            name = obj.get(if_key)
            if obj.get(ns_key) == netns and isinstance(name, str) and _PLANE_IF_RE.fullmatch(name):
                recorded.add(name)
    if recorded:
        return sorted(recorded, key=lambda n: int(n[1:]))
    try:
        text = subprocess.run(["ip", "-n", netns, "-o", "link", "show"], check=True,
                              capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise UserError(f"cannot list interfaces of namespace {netns}: {exc}") from None
    names = [line.split(":")[1].strip().split("@")[0] for line in text.splitlines() if ":" in line]
    return sorted((n for n in names if _PLANE_IF_RE.fullmatch(n)), key=lambda n: int(n[1:]))


def resolve_host(
    host: str, plane: int | None, testbed: str | None = None
) -> tuple[str, str | None]:
    """(namespace, interface) of ``host``'s plane (interface None: all of them)."""
    state = load_state(testbed)
    ns = host_namespace(state, host)
    return ns, None if plane is None else f"p{plane}"


def all_host_interfaces(testbed: str | None = None) -> list[tuple[str, str, str]]:
    """(host, namespace, interface) for every plane NIC of every host."""
    state = load_state(testbed)
    return [(h, ns, i) for h, ns in host_namespaces(state).items()
            for i in plane_interfaces(ns, state)]
