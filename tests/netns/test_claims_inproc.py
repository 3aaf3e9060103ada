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
