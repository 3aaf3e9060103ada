"""The shipped eBPF port object matches its source; its constants match the wire format.

CI has no need for clang: the manifest beside ``port.o`` records the sha256 of
the source it was built from. Where clang and libbpf-dev are installed, the
object is also rebuilt and compared byte for byte (the build is reproducible).
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from testbed import ebpf
from wire import constants as wc

BPF = Path(ebpf.__file__).parent / "bpf"


def manifest() -> dict[str, str]:
    out = {}
    for line in (BPF / "port.o.manifest").read_text().splitlines():
        key, _, value = line.partition(" ")
        out[key] = value
    return out


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_object_built_from_this_source() -> None:
    m = manifest()
    assert m["source_sha256"] == sha256(BPF / "port.c"), (
        "port.c changed since port.o was built: run bash testbed/bpf/build.sh")
    assert m["object_sha256"] == sha256(BPF / "port.o"), "port.o is not the recorded build"
    assert (BPF / "port.o").read_bytes()[:4] == b"\x7fELF"


def test_rebuild_is_byte_identical() -> None:
    clang = shutil.which("clang")
    if clang is None or not Path("/usr/include/bpf/bpf_helpers.h").exists():
        pytest.skip("clang or libbpf-dev not installed (only needed to rebuild port.o)")
    have = subprocess.run([clang, "--version"], capture_output=True, text=True).stdout
    if have.splitlines()[0] != manifest()["clang"]:
        pytest.skip(f"port.o was built with {manifest()['clang']}, this is {have.splitlines()[0]}")
    r = subprocess.run(["bash", str(BPF / "build.sh"), "--check"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def _defines() -> dict[str, int]:
    text = (BPF / "port.c").read_text()
    return {m[1]: int(m[2], 0) for m in re.finditer(r"^#define (\w+) (0x[0-9a-f]+|\d+)u?\b",
                                                     text, re.M)}


def test_c_constants_match_the_wire_format() -> None:
    d = _defines()
    assert d["BRAID_UDP_PORT"] == wc.UDP_PORT
    assert d["BRAID_VERSION"] == wc.VERSION
    assert d["BRAID_TYPE_DATA"] == wc.PacketType.DATA
    assert d["COMMON_HEADER_LEN"] == wc.COMMON_HEADER_LEN
    assert d["HEADER_TAG_LEN"] == wc.HEADER_TAG_LEN
    assert d["HEADER_WORDS_OFFSET"] == wc.HEADER_WORDS_OFFSET
    assert d["DSCP_CONTROL"] == wc.Dscp.CONTROL
    assert d["DSCP_TRIMMED"] == wc.Dscp.TRIMMED
    assert d["DSCP_TRIMMED_LAST_HOP"] == wc.Dscp.TRIMMED_LAST_HOP
    assert d["NO_THRESHOLD"] == ebpf.NO_THRESHOLD


def test_struct_layouts_match() -> None:
    text = (BPF / "port.c").read_text()
    counters = re.search(r"struct port_counters \{(.*?)\};", text, re.S)
    assert counters is not None
    names = re.findall(r"__u64 (\w+);", counters.group(1))
    assert tuple(names) == ebpf.COUNTERS
    cfg = re.search(r"struct port_cfg \{(.*?)\};", text, re.S)
    assert cfg is not None
    fields = re.findall(r"__u(\d+) \w+;", cfg.group(1))
    assert "<" + "".join({"32": "I", "64": "Q"}[f] for f in fields) == ebpf.CFG.format


def test_port_cfg_encoding() -> None:
    raw = ebpf.port_cfg({"rate_bps": 10**8, "buffer": 262144, "trim": 32768, "ecn": None,
                         "loss": 0.25, "last_hop": True, "down": False}, out_idx=7, slot=3)
    out, slot, rate, buf, trim, ecn, loss, last_hop, down, burst_ns, _ = ebpf.CFG.unpack(raw)
    assert (out, slot, rate, buf, trim, ecn) == (7, 3, 10**8, 262144, 32768, ebpf.NO_THRESHOLD)
    assert loss == 2**30 and (last_hop, down) == (1, 0)
    # the virtual queue banks as much sending time as HTB's burst: 2 ms at 100 Mbit/s
    assert burst_ns == ebpf.htb_burst(10**8, 1500) * 8 * 10**9 // 10**8 == 2_000_000
    full = ebpf.CFG.unpack(ebpf.port_cfg({"loss": 1.0}, 1, 0))
    assert full[6] == ebpf.NO_THRESHOLD  # 100% loss saturates instead of wrapping to 0


def test_htb_commands_put_control_first() -> None:
    cmds = ebpf.htb_commands("xb", 100_000_000, 9000)
    assert any("classid 1:10" in c and "prio 0" in c for c in cmds)
    assert any("classid 1:20" in c and "prio 1" in c for c in cmds)
    assert all("quantum 9014" in c for c in cmds if "prio" in c)  # jumbo frames fit
    assert ebpf.htb_commands("xb", 0, 1500) == []
    assert ebpf.htb_commands("xb", 0, 1500, replace=True) == ["qdisc del dev xb root"]
    # a new rate on a shaped port: classes and FIFOs changed in place, nothing
    # deleted (a deleted qdisc drops what it holds)
    change = ebpf.htb_commands("xb", 50_000_000, 1500, change=True)
    assert change and all(c.split()[1] == "change" for c in change), change
    assert not any("del" in c or "root handle" in c for c in change)


def test_gap_histogram_matches_the_c_side() -> None:
    d = _defines()
    assert (d["GAP_UNIT"], d["GAP_MAX_EXP"]) == (ebpf.GAP_UNIT, ebpf.GAP_MAX_EXP)
    text = (BPF / "port.c").read_text()
    gap = re.search(r"struct port_gap \{(.*?)\};", text, re.S)
    assert gap is not None
    # lock, last_len, 4 u64s, gap hist, 2 u64s of lateness, late hist
    assert re.findall(r"__u(\d+) \w+;", gap.group(1)) == ["32"] + ["64"] * 6
    assert ebpf.GAP.size == 4 + 4 + 4 * 8 + 8 * ebpf.GAP_BUCKETS + 2 * 8 + 8 * ebpf.GAP_BUCKETS
    queue = re.search(r"struct port_queue \{(.*?)\};", text, re.S)
    assert queue is not None
    fields = re.findall(r"__u(\d+) \w+;", queue.group(1))
    assert ebpf.QUEUE.size == 4 + sum(int(f) // 8 for f in fields)  # spin lock is 4 bytes


def test_gap_buckets_tile_the_ratio_axis() -> None:
    # every unit count falls inside its bucket's bounds; buckets are contiguous
    for units in [*range(0, 600), 1000, 4095, 4096, 123_456, 2**25, 2**26 - 1]:
        b = ebpf.gap_bucket(units)
        lo, hi = ebpf.gap_bucket_bounds(b)
        assert lo <= units / ebpf.GAP_UNIT < hi, (units, b, lo, hi)
    for b in range(ebpf.GAP_BUCKETS - 1):
        assert ebpf.gap_bucket_bounds(b)[1] == ebpf.gap_bucket_bounds(b + 1)[0]
    assert ebpf.gap_bucket(2**40) == ebpf.GAP_BUCKETS - 1
    # one ideal frame time starts a bucket at most 12.5% wide
    lo, hi = ebpf.gap_bucket_bounds(ebpf.gap_bucket(ebpf.GAP_UNIT))
    assert lo == 1.0 and hi == 1.125


def test_gap_summary_and_window_delta() -> None:
    hist = [0] * ebpf.GAP_BUCKETS
    for units, n in ((32, 90), (40, 9), (200, 1)):  # 1.0 x90, 1.25 x9, 6.25 x1
        hist[ebpf.gap_bucket(units)] += n
    s = ebpf.gap_summary(hist, max_units=200)
    assert s["gaps"] == 100 and s["p50"] == 1.125 and s["max"] == 6.25
    assert s["p99"] == 1.375  # the 99th gap is a 1.25: its bucket's upper bound
    assert ebpf.gap_summary([0] * ebpf.GAP_BUCKETS)["p99"] is None
    before = {"hist": [0] * ebpf.GAP_BUCKETS, "max_units": 200, "rate_bps": 10**8}
    d = ebpf.gap_delta(before, {"hist": hist, "max_units": 200, "rate_bps": 10**8})
    assert d["hist"] == hist and d["max_units"] == 0  # the max is from before the window
    assert ebpf.gap_summary(d["hist"], d["max_units"])["max"] == 6.5  # bucket's top
