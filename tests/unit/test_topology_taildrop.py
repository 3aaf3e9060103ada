"""``taildrop = true`` links: plain tbf tail-drop, no element, no trim, no ECN."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed import topology
from testbed.errors import TestbedError

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "two-hosts-taildrop.toml"


def test_example_is_two_hosts_two_planes_of_plain_tbf() -> None:
    topo = topology.load(EXAMPLE)
    assert (topo.hosts, topo.planes) == (2, 2)
    assert len(topo.links) == 4
    for link in topo.links:
        assert link.taildrop and not link.element
        for port in (link.up, link.down):
            assert port.rate_bps == 100_000_000
            assert port.buffer == 128 << 10
            assert port.trim is None and port.ecn is None
    assert topology.connection_plane_rate(topo) == pytest.approx(12.5e6)


def test_taildrop_per_link_leaves_the_others_trimming() -> None:
    topo = topology.load({
        "hosts": 2, "planes": 2,
        "link": {"rate": "100mbit", "host": {"down": {"trim": "32KB", "ecn": "16KB"}},
                 "h1:p1": {"taildrop": True, "down": {"trim": False, "ecn": False}}},
    })
    plain = topo.link("h1:p1")
    assert plain.taildrop and not plain.element and plain.down.trim is None
    trimming = topo.link("h1:p0")
    assert not trimming.taildrop and trimming.element and trimming.down.trim == 32 << 10


def _write(tmp_path: Path, text: str) -> Path:
    f = tmp_path / "td.toml"
    f.write_text(text)
    return f


def test_taildrop_with_trim_names_the_line(tmp_path: Path) -> None:
    f = _write(tmp_path, 'hosts = 2\nplanes = 1\n[link]\ntaildrop = true\nrate = "100mbit"\n'
                         '[link.host.down]\ntrim = "32KB"\n')
    with pytest.raises(TestbedError) as exc:
        topology.load(f)
    msg = str(exc.value)
    assert f"{f}:7:" in msg and "link.host.down.trim" in msg and "neither trims" in msg


def test_taildrop_with_ecn_on_one_link_names_that_link(tmp_path: Path) -> None:
    f = _write(tmp_path, 'hosts = 2\nplanes = 2\n[link]\nrate = "100mbit"\n'
                         '[link."h0:p1"]\ntaildrop = true\necn = "16KB"\n')
    with pytest.raises(TestbedError) as exc:
        topology.load(f)
    msg = str(exc.value)
    assert f"{f}:7:" in msg and "h0:p1" in msg and "ecn" in msg


def test_taildrop_needs_a_rate_and_no_element(tmp_path: Path) -> None:
    f = _write(tmp_path, "hosts = 2\nplanes = 1\n[link]\ntaildrop = true\n")
    with pytest.raises(TestbedError, match=r"td.toml:4: .*needs one"):
        topology.load(f)
    f = _write(tmp_path, 'hosts = 2\nplanes = 1\n[link]\nrate = "1gbit"\ntaildrop = true\n'
                         "element = true\n")
    with pytest.raises(TestbedError, match=r"td.toml:6: key 'link.element'.*cannot also"):
        topology.load(f)


def test_taildrop_delay_needs_netem(tmp_path: Path) -> None:
    text = 'hosts = 2\nplanes = 1\n[link]\ntaildrop = true\nrate = "1gbit"\ndelay = "1ms"\n'
    with pytest.raises(TestbedError, match=r"td.toml:6: .*sch_netem"):
        topology.load(_write(tmp_path, text))
    topo = topology.load(_write(tmp_path, text), netem=True)
    assert not topo.links[0].element and topo.links[0].up.delay == pytest.approx(1e-3)


def test_taildrop_must_be_a_boolean(tmp_path: Path) -> None:
    f = _write(tmp_path, 'hosts = 2\nplanes = 1\n[link]\nrate = "1gbit"\ntaildrop = "yes"\n')
    with pytest.raises(TestbedError, match=r"td.toml:5: key 'link.taildrop': expected true"):
        topology.load(f)
