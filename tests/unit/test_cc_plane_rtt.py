"""NSCC reads its per-plane base RTTs from the connection's path model."""

from __future__ import annotations

import pytest

import congestion
from congestion.base import AckSample
from congestion.nscc import Nscc, NsccParams
from transport.paths.rtt import PathModel

MTU, BASE, RATE = 1500, 1e-3, 125e6


def _ack(cc: Nscc, rtt: float, plane: int = 0, now: float = 1.0) -> None:
    cc.on_ack(AckSample(now=now, acked_bytes=MTU, rtt=rtt, ecn=False, ev=0,
                        plane=plane, in_flight=10 * MTU))


def _built(model: PathModel, **params: object) -> Nscc:
    cc = congestion.registry.for_connection(
        "nscc-uec", mtu=MTU, base_rtt=BASE, line_rate=RATE, params=params, paths=model)
    assert isinstance(cc, Nscc)
    return cc


def test_the_queueing_delay_is_measured_from_the_models_base() -> None:
    model = PathModel(2)
    cc = _built(model)
    model.delay_sample(0, 1e-3)  # a smaller round trip the model knows of
    _ack(cc, 3e-3)
    assert cc.qdelay == pytest.approx(cc.delay_ewma * 2e-3)
    assert model.delay_base(0) == 1e-3
    assert cc.stats()["min_rtt"] == 1e-3
    # The other plane has no base yet: its first sample is its base.
    _ack(cc, 5e-3, plane=1, now=1.1)
    assert model.delay_base(1) == 5e-3
    assert cc.qdelay == pytest.approx(cc.delay_ewma * 2e-3 * (1 - cc.delay_ewma))


def test_the_pipe_follows_the_models_plane_minima() -> None:
    model = PathModel(2)
    cc = _built(model, plane_mean_bdp=True)
    _ack(cc, 1e-3)  # the fastest round trip: base RTT 1 ms
    assert cc.bdp == pytest.approx(RATE * 1e-3)
    for plane, rtt in ((0, 1e-3), (1, 5e-3)):
        model.plane_sample(plane, rtt)  # the sender feeds the model ...
        cc.on_plane_rtt(plane=plane, rtt=rtt)  # ... then tells the controller
    assert cc.bdp == pytest.approx(RATE * 3e-3)  # the planes' mean
    # A plane the connection does not have (named by a peer) is no pipe.
    model.plane_sample(7, 9e-3)
    cc.on_plane_rtt(plane=7, rtt=9e-3)
    assert cc.bdp == pytest.approx(RATE * 3e-3)


def test_a_controller_alone_keeps_its_own_minima() -> None:
    cc = Nscc(NsccParams.uec_spec(), mtu=MTU, base_rtt=BASE, line_rate=RATE,
              plane_mean_bdp=True)
    _ack(cc, 3e-3)
    assert cc.qdelay == 0.0  # its first sample is its base
    _ack(cc, 4e-3, now=1.1)
    assert cc.qdelay == pytest.approx(cc.delay_ewma * 1e-3)
    cc.on_plane_rtt(plane=0, rtt=3e-3)
    cc.on_plane_rtt(plane=1, rtt=15e-3)
    assert cc.bdp == pytest.approx(RATE * 9e-3)
    cc.on_plane_rtt(plane=1, rtt=-1.0)  # not a round trip
    assert cc.bdp == pytest.approx(RATE * 9e-3)


def test_only_controllers_that_take_the_model_get_it() -> None:
    fixed = congestion.registry.for_connection(
        "fixed", mtu=MTU, base_rtt=BASE, line_rate=RATE, params={"window": 5000},
        paths=PathModel(1))
    assert fixed.cwnd == 5000
