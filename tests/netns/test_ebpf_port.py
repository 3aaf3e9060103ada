"""The eBPF switch port: jumbo-frame trims, choice and fallback of the element,
and a teardown that leaves no programs, pins, mounts or namespaces behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from netns_helpers import links_root, ns_list, udptool

from testbed import ebpf, fabric
from testbed.bpfsys import prog_exists
from testbed.errors import TestbedError
from testbed.fabric import Testbed
from wire.constants import Dscp

pytestmark = pytest.mark.skipif(os.geteuid() == 0 and not ebpf.ebpf_available()[0],
                                reason=f"eBPF port unavailable: {ebpf.ebpf_available()[1]}"
                                if os.geteuid() == 0 else "needs root")
HEADER_LEN = 56


def _mounted(path: Path) -> bool:
    return any(line.split()[4] == str(path)
               for line in Path("/proc/self/mountinfo").read_text().splitlines())


def _recv(tb: Testbed, dst: str, count: int) -> subprocess.Popen[str]:
    rx = tb.popen(dst, udptool("recv", "--count", str(count), "--timeout", "8", "--idle",
                               "0.5"), stdout=subprocess.PIPE, text=True)
    assert rx.stdout is not None
    assert json.loads(rx.stdout.readline())["ready"]
    return rx


def test_jumbo_frames_are_trimmed_to_valid_headers(make_testbed: Any) -> None:
    tb = make_testbed({"hosts": 2, "planes": 1,
                       "link": {"mtu": 9000, "element": True,
                                # slow enough that a Python sender on a busy machine
                                # (~60 Mbit/s of jumbo datagrams) still overloads it
                                "h1:p0": {"down": {"rate": "10mbit", "trim": "64KB",
                                                   "buffer": "512KB"}}}})
    assert tb.element_kind("h1:p0") == "ebpf"
    rx = _recv(tb, "h1", 300)
    try:
        tb.exec("h0", udptool("send", "--to", tb.address("h1", 0), "--count", "300",
                              "--braid", "--size", "8900"), check=True, capture_output=True)
        out = json.loads(rx.communicate(timeout=15)[0])
    finally:
        if rx.poll() is None:
            rx.kill()
            rx.wait()
    st = tb.port_stats()["h1:p0/down"]
    assert st["trimmed"] > 0 and st["tx_errors"] == 0, (json.dumps(st), out)
    assert out["sizes"].get(str(HEADER_LEN), 0) == st["trimmed"], out
    assert out["sizes"].get("8900", 0) > 0, out
    assert out["tos"].get(str(Dscp.TRIMMED_LAST_HOP << 2), 0) == st["trimmed"]
    assert out["packets"] + st["dropped"] == 300


def test_delay_link_uses_userspace_and_delay_fault_is_refused(make_testbed: Any) -> None:
    tb = make_testbed({"hosts": 2, "planes": 1,
                       "link": {"element": True, "h1:p0": {"delay": "1ms"}}})
    assert tb.element_kind("h0:p0") == "ebpf"
    assert tb.element_kind("h1:p0") == "userspace"  # the kernel here cannot delay
    stats = tb.port_stats()
    assert stats["h0:p0/up"]["element"] == "ebpf" and "h1:p0/up" in stats
    with pytest.raises(TestbedError, match="no propagation delay"):
        tb.fault("link h0:p0 delay 2ms")
    assert tb.port_stats()["h1:p0/down"]["delay"] == pytest.approx(1e-3)


def test_forcing_ebpf_on_a_delayed_link_is_an_error(run_root: Path, unique_name: str) -> None:
    spec = {"hosts": 2, "planes": 1, "link": {"element": "ebpf", "delay": "1ms"}}
    with pytest.raises(TestbedError, match="propagation delay"):
        Testbed.up(spec, name=unique_name, run_root=run_root)
    assert not {n for n in ns_list() if n.startswith(f"br{unique_name}-")}
    assert not (run_root / unique_name).exists()  # refused before anything was made


def test_falls_back_to_userspace_in_one_line(make_testbed: Any, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(fabric, "ebpf_available",
                        lambda: (False, "tc is not built with libbpf (test)"))
    tb = make_testbed({"hosts": 2, "planes": 1, "link": {"element": True}})
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["testbed: eBPF port unavailable (tc is not built with libbpf (test)); "
                   "using the userspace element"]
    assert tb.element_kind("h0:p0") == "userspace"
    assert len(tb.state.objects("process")) == 1
    with pytest.raises(TestbedError, match="cannot run here"):
        Testbed.up({"hosts": 2, "planes": 1, "link": {"element": True}}, name="nevermade",
                   run_root=tb.run_dir.parent, element="ebpf")


def test_teardown_leaves_no_programs_pins_or_namespaces(tmp_path: Path,
                                                        unique_name: str) -> None:
    """`up` by the CLI, `down` by another process: everything the port made goes."""
    topo = tmp_path / "t.toml"
    topo.write_text("hosts = 2\nplanes = 2\n[link]\nrate = \"50mbit\"\nelement = true\n"
                    "[link.host.down]\ntrim = \"16KB\"\n")
    run = tmp_path / "run"
    env = {**os.environ, "BRAID_RUN_DIR": str(run)}
    braid = [str(Path(sys.executable).parent / "braid"), "testbed"]
    before = links_root()
    r = subprocess.run([*braid, "up", str(topo), "--name", unique_name], env=env,
                       capture_output=True, text=True, timeout=120)
    try:
        assert r.returncode == 0, r.stderr
        tb = Testbed.attach(unique_name, run_root=run)
        ids = [i for p in tb.planes for i in tb.ebpf(p).prog_ids()]
        assert len(ids) == 8 and all(prog_exists(i) for i in ids)  # 4 links x 2 ends
        pins = run / unique_name / "bpf"
        assert _mounted(pins) and (pins / "p0" / "tc" / "globals" / "braid_cfg").exists()
        assert not tb.state.objects("process")
    finally:
        r = subprocess.run([*braid, "down", "--name", unique_name], env=env,
                           capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    deadline = time.monotonic() + 5  # programs are freed after an RCU grace period
    while any(prog_exists(i) for i in ids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [i for i in ids if prog_exists(i)]
    assert not _mounted(pins) and not pins.exists()
    assert not {n for n in ns_list() if n.startswith(f"br{unique_name}-")}
    assert links_root() == before


def test_failed_attach_unmounts_the_pins(run_root: Path, unique_name: str,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(self: ebpf.EbpfPlane, links: list[dict[str, Any]]) -> None:
        raise KeyboardInterrupt  # Ctrl-C after the bpffs was mounted

    monkeypatch.setattr(ebpf.EbpfPlane, "attach", boom)
    with pytest.raises(KeyboardInterrupt):
        Testbed.up({"hosts": 2, "planes": 1, "link": {"element": True}}, name=unique_name,
                   run_root=run_root)
    assert not _mounted(run_root / unique_name / "bpf")
    assert not (run_root / unique_name).exists()
    assert not {n for n in ns_list() if n.startswith(f"br{unique_name}-")}


def _htb_rates(tb: Testbed, plane: int, dev: str) -> dict[str, str]:
    import re

    r = subprocess.run(["nsenter", f"--net=/run/netns/{tb.prefix}p{plane}-w", "tc", "class",
                        "show", "dev", dev], capture_output=True, text=True, timeout=30)
    return dict(re.findall(r"class htb (\S+) .*? rate (\S+)", r.stdout))


def test_rate_fault_reshapes_and_heal_restores(make_testbed: Any) -> None:
    tb = make_testbed({"hosts": 2, "planes": 1,
                       "link": {"element": True, "h1:p0": {"down": {"rate": "50mbit"}}}})
    wa, _wb = tb.wire_ifnames(tb.topo.link("h1:p0"))  # the down port leaves by wa
    assert _htb_rates(tb, 0, wa)["1:1"] == "50Mbit"
    tb.fault("link h1:p0 rate 10mbit down")
    assert _htb_rates(tb, 0, wa)["1:1"] == "10Mbit"
    assert tb.port_stats()["h1:p0/down"]["rate_bps"] == 10_000_000
    wa0, _ = tb.wire_ifnames(tb.topo.link("h0:p0"))
    assert _htb_rates(tb, 0, wa0) == {}  # unshaped: no HTB at all
    tb.fault("link h0:p0 rate 20mbit down")
    assert _htb_rates(tb, 0, wa0)["1:1"] == "20Mbit"
    tb.fault("link h1:p0 heal")
    tb.fault("link h0:p0 heal")
    assert _htb_rates(tb, 0, wa)["1:1"] == "50Mbit" and _htb_rates(tb, 0, wa0) == {}
    rx = _recv(tb, "h1", 20)  # still forwarding after all that
    try:
        tb.exec("h0", udptool("send", "--to", tb.address("h1", 0), "--count", "20"),
                check=True, capture_output=True)
        assert json.loads(rx.communicate(timeout=15)[0])["packets"] == 20
    finally:
        if rx.poll() is None:
            rx.kill()
            rx.wait()


def test_mark_fault_ce_marks_a_share_of_ect_data(make_testbed: Any) -> None:
    tb = make_testbed({"hosts": 2, "planes": 1, "link": {"element": True}})

    def send(tos: str, n: int) -> dict[str, Any]:
        rx = _recv(tb, "h1", n)
        try:
            tb.exec("h0", udptool("send", "--to", tb.address("h1", 0), "--count", str(n),
                                  "--size", "500", "--tos", tos), check=True,
                    capture_output=True)
            return dict(json.loads(rx.communicate(timeout=15)[0])["tos"])
        finally:
            if rx.poll() is None:
                rx.kill()
                rx.wait()

    tb.fault("link h0:p0 mark 50% up")
    ect = send("0x2a", 300)  # DSCP DATA + ECT(0)
    marked = tb.port_stats()["h0:p0/up"]["marked"]
    assert ect.get(str(0x2B), 0) == marked and 0 < marked < 300, (ect, marked)  # at random
    assert ect.get(str(0x2A), 0) > 0, ect
    not_ect = send("0x28", 100)  # not ECN-capable: never marked
    assert set(not_ect) == {str(0x28)}, not_ect
    tb.fault("link h0:p0 heal")
    assert set(send("0x2a", 100)) == {str(0x2A)}  # healed: no marks
    assert tb.port_stats()["h0:p0/up"]["marked"] == marked
