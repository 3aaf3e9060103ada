"""``braid bench claims --inproc``: the Braid runs of a row with each host's
endpoint inside its claims worker (``braid.open``), no daemon running."""

from __future__ import annotations

import json
from pathlib import Path

from test_claims import _claims


def test_claims_loss_row_inproc(tmp_path: Path, unique_name: str) -> None:
    out = tmp_path / "o"
    work = tmp_path / "w"
    r = _claims(["--quick", "--rows", "loss", "--stacks", "braid", "--inproc", "--out",
                 str(out), "--work", str(work)], unique_name, timeout=300)
    assert "daemons stopped: Braid runs use in-process endpoints" in r.stdout + r.stderr
    data = json.loads((out / "claims.json").read_text())
    assert data["inproc"] is True
    assert data["transfers"] and all(t["ok"] for t in data["transfers"]), data["transfers"]
    # no daemon ran: the Braid CPU is the workers' own
    for t in data["transfers"]:
        cpu = t["cpu"]
        assert cpu["daemons"] is None and cpu["workers"] > 0, cpu
    (res,) = data["rows"]["loss"]["per_stack"]["braid"].values()
    assert res["complete"] and res["goodput_mbps"] > 0, res


def test_claims_inproc_keeps_the_connections_figures(tmp_path: Path, unique_name: str) -> None:
    """In-process, a worker's endpoint loses a connection when the peer's
    worker ends first; its figures (the park, the sender's state) are
    taken before that, as a daemon keeps them."""
    out = tmp_path / "o"
    r = _claims(["--quick", "--rows", "compound", "--stacks", "braid", "--inproc", "--out",
                 str(out), "--work", str(tmp_path / "w")], unique_name, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    data = json.loads((out / "claims.json").read_text())
    res = data["rows"]["compound"]["per_stack"]["braid"]
    for case in (res, res["ce"]):
        assert case["sender"] is not None and case["srtt_ms"], case
        assert case["planes"]["parked_after_ms"] is not None, case["planes"]
