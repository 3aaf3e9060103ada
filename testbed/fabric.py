"""Build and tear down a multi-plane namespace fabric (pyroute2, no `ip`).

Per testbed (prefix ``br<name>-``):

* one namespace per host (``brNAME-h3``) with one interface per plane (``p0``,
  ``p1``...), address 10.<plane>.<host>.2/24;
* per plane either one switch namespace (``brNAME-p0-sw``) or leaves
  (``brNAME-p0-l0``) and spines (``brNAME-p0-s1``) forwarding in the kernel,
  leaves using ECMP multipath routes over every spine with L4 hashing
  (``fib_multipath_hash_policy=1``), so a UDP source port (Braid's EV) picks
  the spine;
* per plane with link elements a "wire" namespace (``brNAME-p0-w``) holding
  both veth ends of every element link, bridged by the eBPF port
  (``testbed.ebpf``, the default) or — for links that need propagation delay
  or ask for it, or where eBPF cannot load — by one userspace element process
  (``testbed.element``) per plane.

Links without an element (``taildrop = true`` asks for that explicitly) are
plain veth pairs shaped by tc tbf on both ends, ``limit`` = the port's
buffer: a tail-drop queue, no trim, no ECN (``qdisc_stats`` reads their drop
counters), its bucket ``BATCH_FRAMES`` frames beyond the largest packet it
takes whole; with an element the element's emulated queue shapes them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from pyroute2 import NetNS, netns
from pyroute2.netlink.exceptions import NetlinkError

from testbed import nsutil
from testbed.ebpf import EbpfPlane, ebpf_available, mount_bpffs, umount_bpffs
from testbed.errors import TestbedError
from testbed.state import DEFAULT_RUN_ROOT, RunState, check_name, prefix_for
from testbed.topology import (
    ELEMENT_KINDS,
    LinkSpec,
    PortConfig,
    Topology,
    fabric_addresses,
    gateway_address,
    host_address,
    load,
)

ELEMENT_MARK = "testbed.element"
#: A plain link's tbf queues, drops and sends a host's GSO batch of up to ~1
#: ms of its rate whole (as a host's own qdisc does), and its token bucket
#: holds this many frames beyond that: with the 1 ms alone it barely held
#: Braid's 8-frame runs, and each timer that fired more than ~30 us late
#: cost the link rate for good (docs/decisions/0034).
BATCH_FRAMES = 16
_netem_cache: dict[str, Any] = {}


def netem_available(probe_ns: str = "brprobe-netem") -> tuple[bool, str]:
    """Try a netem qdisc on a scratch veth in a scratch namespace (cached)."""
    if "result" in _netem_cache:
        return _netem_cache["result"]  # type: ignore[no-any-return]
    probe_ns = f"{probe_ns}{os.getpid()}"
    result: tuple[bool, str]
    try:
        netns.create(probe_ns)
    except Exception as exc:  # no namespaces at all: the caller fails later anyway
        return False, f"cannot create a scratch namespace: {exc}"
    try:
        with nsutil.open_netns(probe_ns) as ns:
            ns.link("add", ifname="nt0", kind="veth", peer="nt1")
            idx = ns.link_lookup(ifname="nt0")[0]
            try:
                ns.tc("add", "netem", index=idx, handle="1:", delay=1000)
                result = (True, "netem qdisc added on a scratch veth")
            except NetlinkError as exc:
                result = (False, f"adding a netem qdisc failed: {exc.args[1]} "
                                 f"(errno {exc.code}; ENOENT means the kind is unknown)")
    finally:
        netns.remove(probe_ns)
    _netem_cache["result"] = result
    return result


class Testbed:
    """A running fabric. Use ``Testbed.up(...)`` or ``Testbed.attach(name)``."""

    __test__ = False  # not a pytest test class

    def __init__(self, topo: Topology, state: RunState) -> None:
        self.topo = topo
        self.state = state
        self.name: str = state.data["name"]
        self.prefix: str = state.data["prefix"]
        self.run_dir = state.run_dir
        self._ns: dict[str, NetNS] = {}

    # ------------------------------------------------------------------ API
    @classmethod
    def up(cls, path_or_spec: str | Path | dict[str, Any], name: str | None = None,
           run_root: Path = DEFAULT_RUN_ROOT, element: str | None = None) -> Testbed:
        """Build the fabric described by a topology file or dict; return it live.

        ``element``: "ebpf" or "userspace" forces the link element of every
        element link that does not name one itself; None picks the eBPF port
        where it can run (no propagation delay on the link)."""
        if element not in (None, "auto", *ELEMENT_KINDS):
            raise TestbedError(f"element must be 'ebpf' or 'userspace', got {element!r}")
        if os.geteuid() != 0:
            raise TestbedError("the testbed needs root (network namespaces)")
        netem, _why = netem_available()
        if isinstance(path_or_spec, dict):
            spec = dict(path_or_spec)
        else:
            import tomllib
            load(path_or_spec, netem)  # validates with file/line context
            spec = tomllib.loads(Path(path_or_spec).read_text())
        topo = load(spec, netem)
        if name is None:
            name = str(spec.get("name") or (Path(path_or_spec).stem if not isinstance(
                path_or_spec, dict) else "braid"))
            name = "".join(c for c in name.lower() if c.isalnum())[:12] or "braid"
        check_name(name)
        old = RunState.load(run_root, name)
        if old is not None:
            if any(nsutil.netns_exists(o["name"]) for o in old.objects("netns")) or any(
                    nsutil.pid_alive(p["pid"]) for p in old.objects("process")):
                raise TestbedError(f"testbed {name!r} is already up ({old.run_dir}); "
                                f"run 'braid testbed down --name {name}' first")
            _teardown(old)
        kinds = _element_kinds(topo, element)
        state = RunState.create(run_root, name, spec)
        state.set(netem=netem, element_kinds=kinds)
        tb = cls(topo, state)
        try:
            tb._build()
        except BaseException:
            tb.down()
            raise
        state.set(status="up", built_at=time.time())
        return tb

    @classmethod
    def attach(cls, name: str, run_root: Path = DEFAULT_RUN_ROOT) -> Testbed:
        state = RunState.load(run_root, check_name(name))
        if state is None:
            raise TestbedError(f"no testbed named {name!r} (nothing in {run_root / name})")
        return cls(load(state.data["spec"], state.data.get("netem", False)), state)

    def down(self) -> None:
        """Remove everything recorded (idempotent)."""
        for ns in self._ns.values():
            with suppress(Exception):
                ns.close()
        self._ns.clear()
        _teardown(self.state)

    def __enter__(self) -> Testbed:
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    @property
    def hosts(self) -> list[str]:
        return self.topo.host_names

    @property
    def planes(self) -> list[int]:
        return list(range(self.topo.planes))

    def address(self, host: str | int, plane: int, family: int = 4) -> str:
        """Address of host i on plane p: 10.p.i.2, or fd00:0:p:i::2 (hex) with family=6."""
        i = self._host_index(host)
        if not 0 <= plane < self.topo.planes:
            raise TestbedError(f"no plane {plane} (planes 0..{self.topo.planes - 1})")
        if family == 6 and not self.topo.ipv6:
            raise TestbedError("this topology has no IPv6 addresses (set ipv6 = true)")
        return host_address(i, plane, family)

    def netns(self, node: str | int) -> str:
        """Namespace name of a host ('h3' or 3) or a switch node ('p0-s1')."""
        if isinstance(node, int) or node in self.hosts:
            return self.prefix + f"h{self._host_index(node)}"
        nodes = [n for p in self.planes for n in self.topo.switch_nodes(p)]
        if node not in nodes:
            raise TestbedError(f"no node {node!r} (hosts {self.hosts[0]}.., "
                               f"switches {nodes[:3]}..)")
        return self.prefix + node

    def popen(self, host: str | int, argv: list[str], **popen_kw: Any) -> subprocess.Popen[Any]:
        """Start ``argv`` inside the host's (or switch's) namespace."""
        return nsutil.popen(self.netns(host), argv, **popen_kw)

    def exec(self, host: str | int, argv: list[str], **run_kw: Any
             ) -> subprocess.CompletedProcess[Any]:
        """Run ``argv`` to completion inside a namespace (subprocess.run keywords)."""
        return nsutil.run(self.netns(host), argv, **run_kw)

    def port_stats(self) -> dict[str, dict[str, Any]]:
        """Per element port ('h3:p1/down') counters and settings: the userspace
        elements' stats files and the eBPF ports' maps."""
        out: dict[str, dict[str, Any]] = {}
        for f in sorted((self.run_dir / "elements").glob("*.stats.json")):
            try:
                out.update(json.loads(f.read_text())["ports"])
            except (OSError, ValueError, KeyError):
                continue
        for plane in self.ebpf_planes():
            with suppress(TestbedError):
                out.update(self.ebpf(plane).stats())
        return dict(sorted(out.items()))

    def port_gaps(self) -> dict[str, dict[str, Any]]:
        """Per eBPF port: its departure-gap histogram so far (``EbpfPlane.gaps``)."""
        out: dict[str, dict[str, Any]] = {}
        for plane in self.ebpf_planes():
            with suppress(TestbedError):
                out.update(self.ebpf(plane).gaps())
        return dict(sorted(out.items()))

    def element_kind(self, link: str) -> str:
        """'ebpf' or 'userspace' for an element link, '' for a plain one."""
        kinds: dict[str, str] = self.state.data.get("element_kinds") or {}
        return kinds.get(link, "")

    def ebpf_planes(self) -> list[int]:
        return sorted({lk.plane for lk in self.topo.links
                       if lk.element and self.element_kind(lk.name) == "ebpf"})

    def ebpf(self, plane: int) -> EbpfPlane:
        return EbpfPlane(self.run_dir, plane, self.prefix + self.wire_node(plane))

    def shaped_ports(self) -> dict[str, list[tuple[str, str, int]]]:
        """Per node, its plain links' tbf ports: (port name as in
        ``qdisc_stats``, interface, rate in bit/s). What the fidelity
        monitor samples where no link element keeps the figures itself."""
        netem = bool(self.state.data.get("netem"))
        out: dict[str, list[tuple[str, str, int]]] = {}
        for link in self.topo.links:
            if link.element:
                continue
            for d, node, ifname, port in (("up", link.a, link.a_if, link.up),
                                          ("down", link.b, link.b_if, link.down)):
                if port.rate_bps and not (netem and (port.delay or port.loss)):
                    out.setdefault(node, []).append((f"{link.name}/{d}", ifname,
                                                     int(port.rate_bps)))
        return out

    def qdisc_stats(self) -> dict[str, dict[str, int]]:
        """Per shaped plain link port ('h0:p1/up' is the host's egress, '/down'
        the switch's towards the host): the tbf's counters from ``tc -s``
        (``sent_packets``, ``sent_bytes``, ``drops``, ``overlimits``,
        ``backlog``). A tail-drop link's drops are here and nowhere else: the
        sender's send() succeeded."""
        out: dict[str, dict[str, int]] = {}
        for link in self.topo.links:
            if link.element:
                continue
            for d, node, ifname in (("up", link.a, link.a_if), ("down", link.b, link.b_if)):
                r = nsutil.run(self.prefix + node, ["tc", "-s", "-j", "qdisc", "show", "dev",
                                                    ifname], capture_output=True, text=True)
                if r.returncode != 0:
                    raise TestbedError(f"tc -s qdisc show dev {ifname} failed: "
                                       f"{r.stderr.strip()}")
                for q in json.loads(r.stdout or "[]"):
                    if q.get("kind") in ("tbf", "netem"):
                        out[f"{link.name}/{d}"] = {
                            "sent_packets": int(q.get("packets", 0)),
                            "sent_bytes": int(q.get("bytes", 0)),
                            "drops": int(q.get("drops", 0)),
                            "overlimits": int(q.get("overlimits", 0)),
                            "backlog": int(q.get("backlog", 0))}
        return out

    def elements_alive(self) -> dict[int, bool]:
        """Plane -> is its link element process running."""
        return {o["plane"]: bool(o.get("pid")) and nsutil.pid_alive(o["pid"])
                and ELEMENT_MARK in nsutil.pid_cmdline(o["pid"])
                for o in self.state.objects("process") if o.get("role") == "element"}

    def link_counters(self, node: str, ifname: str) -> dict[str, int]:
        """Kernel counters of an interface in a node's namespace."""
        with nsutil.open_netns(self.netns(node)) as ns:
            link = ns.link("get", ifname=ifname)[0]
            st = link.get_attr("IFLA_STATS64")
            return {k: int(st[k]) for k in ("rx_packets", "tx_packets", "rx_bytes",
                                             "tx_bytes", "rx_dropped", "tx_dropped")}

    def fault(self, spec: str) -> list[str]:
        """Apply one fault ('plane 2 down', 'link h3:p1 loss 5%', ...); blocks for
        faults with a duration (reboot, flap). Returns what was done."""
        from testbed.faults import apply_fault

        return apply_fault(self, spec)

    # ------------------------------------------------------------ internals
    def _host_index(self, host: str | int) -> int:
        if isinstance(host, int):
            i = host
        elif host.startswith("h") and host[1:].isdigit():
            i = int(host[1:])
        else:
            raise TestbedError(f"no host {host!r} (hosts are h0..h{self.topo.hosts - 1})")
        if not 0 <= i < self.topo.hosts:
            raise TestbedError(f"no host {host!r} (hosts are h0..h{self.topo.hosts - 1})")
        return i

    def _handle(self, node: str) -> NetNS:
        if node not in self._ns:
            self._ns[node] = nsutil.open_netns(self.prefix + node, flags=0)
        return self._ns[node]

    def wire_node(self, plane: int) -> str:
        return f"p{plane}-w"

    @staticmethod
    def wire_ifnames(link: LinkSpec) -> tuple[str, str]:
        base = link.name.split(":")[0].replace("-", "")
        return base + "a", base + "b"

    def _build(self) -> None:
        topo = self.topo
        nodes = [f"h{i}" for i in range(topo.hosts)]
        wires = sorted({lk.plane for lk in topo.links if lk.element})
        for p in range(topo.planes):
            nodes += topo.switch_nodes(p)
        nodes += [self.wire_node(p) for p in wires]
        for node in nodes:
            nsname = self.prefix + node
            self.state.record(type="netns", name=nsname)
            netns.create(nsname)
            v6 = "0" if topo.ipv6 and not node.endswith("-w") else "1"
            settings = {"net.ipv6.conf.all.disable_ipv6": v6,
                        "net.ipv6.conf.default.disable_ipv6": v6,
                        "net.ipv4.conf.all.rp_filter": "0",
                        "net.ipv4.conf.default.rp_filter": "0"}
            if v6 == "0":
                # no DAD delay, no router solicitations: addresses usable at once
                for scope in ("all", "default"):
                    settings.update({f"net.ipv6.conf.{scope}.accept_dad": "0",
                                     f"net.ipv6.conf.{scope}.accept_ra": "0",
                                     f"net.ipv6.conf.{scope}.router_solicitations": "0"})
            if "-" in node and not node.endswith("-w"):  # a switch
                settings.update({"net.ipv4.ip_forward": "1",
                                 "net.ipv4.fib_multipath_hash_policy": "1"})
                if v6 == "0":
                    # hash addresses, protocol, flow label and both ports: the EV may
                    # ride in the UDP source port or in the flow label
                    settings.update({"net.ipv6.conf.all.forwarding": "1",
                                     "net.ipv6.fib_multipath_hash_policy": "3",
                                     "net.ipv6.fib_multipath_hash_fields": "0x003f"})
            nsutil.sysctls(nsname, settings)
            ns = self._handle(node)
            ns.link("set", index=ns.link_lookup(ifname="lo")[0], state="up")
        for link in topo.links:
            self._build_link(link)
        self._routes()
        for p in self.ebpf_planes():
            self._attach_ebpf(p)
        # Start every plane's element first, then wait: each takes ~0.5 s to import.
        userspace = sorted({lk.plane for lk in topo.links
                            if lk.element and self.element_kind(lk.name) == "userspace"})
        started = [(p, self._start_element(p)) for p in userspace]
        deadline = time.monotonic() + 15
        for p, proc in started:
            files = self.element_files(p)
            while not files["stats"].exists():
                if proc.poll() is not None or time.monotonic() > deadline:
                    tail = files["log"].read_text()[-800:] if files["log"].exists() else ""
                    raise TestbedError(f"link element for plane {p} did not start:\n{tail}")
                time.sleep(0.02)
        for ns in self._ns.values():
            ns.close()
        self._ns.clear()

    def _veth(self, a: str, a_if: str, b: str, b_if: str, mtu: int) -> None:
        self.state.record(type="veth", ns=self.prefix + a, ifname=a_if,
                          peer_ns=self.prefix + b, peer=b_if)
        ns_a = self._handle(a)
        ns_a.link("add", ifname=a_if, kind="veth",
                  peer={"ifname": b_if, "net_ns_fd": self.prefix + b})
        for node, ifname in ((a, a_if), (b, b_if)):
            ns = self._handle(node)
            idx = ns.link_lookup(ifname=ifname)[0]
            ns.link("set", index=idx, mtu=mtu, state="up")

    def _build_link(self, link: LinkSpec) -> None:
        if link.element:
            w = self.wire_node(link.plane)
            wa, wb = self.wire_ifnames(link)
            self._veth(link.a, link.a_if, w, wa, link.mtu)
            self._veth(link.b, link.b_if, w, wb, link.mtu)
            # Packets routed over veth carry partial checksums; the element
            # re-sends frames as they are, so the feeders must complete them.
            for node, ifname in ((link.a, link.a_if), (link.b, link.b_if)):
                r = nsutil.run(self.prefix + node, ["ethtool", "-K", ifname, "tx", "off"],
                               capture_output=True, text=True)
                if r.returncode != 0:
                    raise TestbedError(f"ethtool -K {ifname} tx off failed: {r.stderr.strip()}")
        else:
            self._veth(link.a, link.a_if, link.b, link.b_if, link.mtu)
            self._shape(link.a, link.a_if, link.up, link.mtu)
            self._shape(link.b, link.b_if, link.down, link.mtu)
        if link.kind == "host" and not link.element:
            self._host_segments(link.a, link.a_if)
        a_ns, b_ns = self._handle(link.a), self._handle(link.b)
        a_idx = a_ns.link_lookup(ifname=link.a_if)[0]
        b_idx = b_ns.link_lookup(ifname=link.b_if)[0]
        for fam in (4, 6) if self.topo.ipv6 else (4,):
            if link.kind == "host":
                i = int(link.a[1:])
                plen = 24 if fam == 4 else 64
                a_ns.addr("add", index=a_idx, address=host_address(i, link.plane, fam),
                          prefixlen=plen)
                b_ns.addr("add", index=b_idx, address=gateway_address(i, link.plane, fam),
                          prefixlen=plen)
            else:
                j, k = int(link.a.split("-l")[1]), int(link.b.split("-s")[1])
                leaf_ip, spine_ip = fabric_addresses(link.plane, j, k, fam)
                plen = 31 if fam == 4 else 127
                a_ns.addr("add", index=a_idx, address=leaf_ip, prefixlen=plen)
                b_ns.addr("add", index=b_idx, address=spine_ip, prefixlen=plen)

    def _host_segments(self, node: str, ifname: str) -> None:
        """A host's UDP GSO batches leave its NIC as single datagrams, as a
        NIC's segmentation offload puts them on a real wire: switches,
        shapers and link elements then see packets, never 64 KB batches.
        (Element feeders already have ``tx off``, which also stops GSO.)"""
        r = nsutil.run(self.prefix + node, ["ethtool", "-K", ifname, "tx-udp-segmentation",
                                            "off"], capture_output=True, text=True)
        if r.returncode != 0:
            raise TestbedError(f"ethtool -K {ifname} tx-udp-segmentation off failed: "
                            f"{r.stderr.strip()}")

    def _shape(self, node: str, ifname: str, port: PortConfig, mtu: int) -> None:
        if port.rate_bps == 0 and not (self.state.data.get("netem") and (port.delay or port.loss)):
            return
        ns = self._handle(node)
        idx = ns.link_lookup(ifname=ifname)[0]
        if self.state.data.get("netem") and (port.delay or port.loss):
            kw: dict[str, Any] = {"delay": int(port.delay * 1e6), "loss": port.loss * 100,
                                  "limit": max(1, port.buffer // mtu)}
            if port.rate_bps:
                kw["rate"] = port.rate_bps // 8
            ns.tc("add", "netem", index=idx, handle="1:", **kw)
            return
        # The largest packet the tbf takes whole: ~1 ms of rate, >= 2
        # frames (a larger GSO batch it splits into frames). Its bucket
        # holds that and BATCH_FRAMES more, so that a late timer costs no
        # rate; a peak bucket of the largest packet at 10x the rate keeps the
        # two apart (pyroute2's tbf has no peak rate: tc itself).
        largest = max(2 * mtu, port.rate_bps // 8 // 1000)
        r = nsutil.run(self.prefix + node, [
            "tc", "qdisc", "add", "dev", ifname, "root", "handle", "1:", "tbf",
            "rate", f"{port.rate_bps}bit", "burst", str(largest + BATCH_FRAMES * (mtu + 14)),
            "limit", str(port.buffer), "peakrate", f"{10 * port.rate_bps}bit",
            "mtu", str(largest)], capture_output=True, text=True)
        if r.returncode != 0:
            raise TestbedError(f"tc qdisc add dev {ifname} tbf failed: {r.stderr.strip()}")

    def _routes(self) -> None:
        for fam in (4, 6) if self.topo.ipv6 else (4,):
            self._routes_family(fam)

    def _routes_family(self, fam: int) -> None:
        topo = self.topo

        def plane_net(p: int) -> dict[str, Any]:
            return ({"dst": f"10.{p}.0.0", "dst_len": 16} if fam == 4
                    else {"dst": f"fd00:0:{p:x}::", "dst_len": 48})

        def host_net(p: int, i: int) -> dict[str, Any]:
            return ({"dst": f"10.{p}.{i}.0", "dst_len": 24} if fam == 4
                    else {"dst": f"fd00:0:{p:x}:{i:x}::", "dst_len": 64})

        for p in range(topo.planes):
            for i in range(topo.hosts):
                self._handle(f"h{i}").route("add", **plane_net(p),
                                            gateway=gateway_address(i, p, fam))
            if topo.kind != "leafspine":
                continue
            for j in range(topo.leaves):
                hops = [{"gateway": fabric_addresses(p, j, k, fam)[1]}
                        for k in range(topo.spines)]
                leaf = self._handle(f"p{p}-l{j}")
                if len(hops) == 1:
                    leaf.route("add", **plane_net(p), gateway=hops[0]["gateway"])
                else:
                    leaf.route("add", **plane_net(p), multipath=hops)
            for k in range(topo.spines):
                spine = self._handle(f"p{p}-s{k}")
                for i in range(topo.hosts):
                    leaf_ip = fabric_addresses(p, topo.leaf_of(i), k, fam)[0]
                    spine.route("add", **host_net(p, i), gateway=leaf_ip)

    def element_files(self, plane: int) -> dict[str, Path]:
        d = self.run_dir / "elements"
        return {"spec": d / f"p{plane}.spec.json", "stats": d / f"p{plane}.stats.json",
                "ctl": d / f"p{plane}.sock", "log": d / f"p{plane}.log"}

    def _attach_ebpf(self, plane: int) -> None:
        pin_root = self.run_dir / "bpf"
        if not any(o.get("path") == str(pin_root) for o in self.state.objects("bpffs")):
            self.state.record(type="bpffs", path=str(pin_root))
            mount_bpffs(pin_root)
        links = []
        for link in self.topo.links:
            if link.element and link.plane == plane and self.element_kind(link.name) == "ebpf":
                wa, wb = self.wire_ifnames(link)
                links.append({"name": link.name, "a_if": wa, "b_if": wb, "mtu": link.mtu,
                              "up": link.up.to_dict(), "down": link.down.to_dict(),
                              # the nodes' ends, where departures are timed
                              "a_far": [self.prefix + link.a, link.a_if],
                              "b_far": [self.prefix + link.b, link.b_if]})
        self.ebpf(plane).attach(links)

    def _start_element(self, plane: int) -> subprocess.Popen[bytes]:
        files = self.element_files(plane)
        files["spec"].parent.mkdir(exist_ok=True)
        links = []
        for link in self.topo.links:
            if link.element and link.plane == plane \
                    and self.element_kind(link.name) == "userspace":
                wa, wb = self.wire_ifnames(link)
                links.append({"name": link.name, "a_if": wa, "b_if": wb,
                              "up": link.up.to_dict(), "down": link.down.to_dict()})
        files["spec"].write_text(json.dumps({"links": links}, indent=1))
        ns = self.prefix + self.wire_node(plane)
        argv = [sys.executable, "-m", ELEMENT_MARK, "--netns", ns, "--spec", str(files["spec"]),
                "--stats", str(files["stats"]), "--ctl", str(files["ctl"])]
        obj = self.state.record(type="process", role="element", plane=plane, pid=None,
                                cmd=argv)
        files["stats"].unlink(missing_ok=True)
        with open(files["log"], "ab") as log:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                    start_new_session=True, cwd="/")
        obj["pid"] = proc.pid
        self.state.save()
        return proc


def _element_kinds(topo: Topology, default: str | None) -> dict[str, str]:
    """Link name -> 'ebpf' | 'userspace' for every element link.

    A link's own ``element = "..."`` wins, then ``default``; otherwise the eBPF
    port, except on links with propagation delay (the kernel here cannot delay
    without sch_netem) or where the eBPF port cannot load (said in one line)."""
    kinds: dict[str, str] = {}
    for lk in topo.links:
        if not lk.element:
            continue
        kind = lk.element_kind if lk.element_kind != "auto" else (default or "auto")
        delayed = bool(lk.up.delay or lk.down.delay)
        if kind == "ebpf" and delayed:
            raise TestbedError(f"link {lk.name}: the eBPF port cannot add propagation delay "
                            "(no sch_netem here): use element = \"userspace\" or no delay")
        if kind == "auto":
            kind = "userspace" if delayed else "ebpf"
        kinds[lk.name] = kind
    if "ebpf" in kinds.values():
        ok, why = ebpf_available()
        if not ok:
            forced = default == "ebpf"
            if forced:
                raise TestbedError(f"the eBPF port cannot run here: {why}")
            print(f"testbed: eBPF port unavailable ({why}); using the userspace element",
                  file=sys.stderr)
            kinds = {k: "userspace" for k in kinds}
    return kinds


def _teardown(state: RunState) -> None:
    """Kill recorded processes and anything in our namespaces, remove namespaces."""
    from testbed.daemons import DAEMON_MARK

    names = [o["name"] for o in state.objects("netns")]
    prefix = state.data["prefix"]
    procs = [o["pid"] for o in state.objects("process")
             if o.get("pid") and any(mark in nsutil.pid_cmdline(o["pid"])
                                     for mark in (ELEMENT_MARK, DAEMON_MARK))]
    nsutil.kill_pids(procs + nsutil.pids_in(names))
    for name in reversed(names):
        if not name.startswith(prefix):
            continue  # never touch what is not ours
        if nsutil.netns_exists(name):
            try:
                netns.remove(name)
            except OSError as exc:
                raise TestbedError(f"cannot remove namespace {name}: {exc}") from None
    # The namespaces took the veths and so the attached programs with them; the
    # bpffs holds the pinned maps: unmounting it frees them.
    for o in state.objects("bpffs"):
        if Path(o["path"]).is_relative_to(state.run_dir):
            umount_bpffs(Path(o["path"]))
    if not state.run_dir.exists():
        return  # already removed: down is idempotent
    state.set(status="down")
    for f in sorted(state.run_dir.rglob("*"), reverse=True):
        if f.is_file() or f.is_socket():
            f.unlink(missing_ok=True)
        elif f.is_dir():
            f.rmdir()
    with suppress(OSError):
        state.run_dir.rmdir()


def down_by_name(name: str, run_root: Path = DEFAULT_RUN_ROOT) -> bool:
    state = RunState.load(run_root, check_name(name))
    if state is None:
        return False
    _teardown(state)
    return True


@contextmanager
def testbed(path_or_spec: str | Path | dict[str, Any], name: str | None = None,
            run_root: Path = DEFAULT_RUN_ROOT) -> Iterator[Testbed]:
    tb = Testbed.up(path_or_spec, name=name, run_root=run_root)
    try:
        yield tb
    finally:
        tb.down()


__all__ = ["Testbed", "down_by_name", "netem_available", "prefix_for", "testbed"]
