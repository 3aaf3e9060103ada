"""README.md's "Using it" block, run word for word (extracted, never copied):
testbed up, braid perf, daemons, a plane-1 capture decrypted with the key log,
a fault timeline, teardown. If this fails, the README is wrong."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
MARKER = "<!-- readme-test: using-it -->"
NAME = "twohosts"  # examples/two-hosts-4-planes.toml names its testbed


def readme_block(marker: str = MARKER) -> str:
    text = (REPO / "README.md").read_text()
    assert marker in text, f"README.md lost its {marker!r} marker"
    m = re.search(r"```sh\n(.*?)```", text[text.index(marker):], re.S)
    assert m is not None, "no ```sh block after the marker"
    return m.group(1)


def test_block_is_what_the_readme_says() -> None:
    block = readme_block()
    assert "braid testbed up examples/two-hosts-4-planes.toml" in block
    assert block.rstrip().splitlines()[-1].startswith("braid testbed down")


def _namespaces() -> list[str]:
    d = Path("/run/netns")
    return sorted(p.name for p in d.glob(f"br{NAME}-*")) if d.exists() else []


def test_readme_using_it_runs_word_for_word(tmp_path: Path) -> None:
    if _namespaces():
        pytest.skip(f"a testbed named {NAME!r} is already up on this machine")
    work = tmp_path / "work"  # the user's clone, minus everything the block must not need
    work.mkdir()
    for entry in (".venv", "examples"):
        (work / entry).symlink_to(REPO / entry)
    # A short run root: element and daemon sockets live there (AF_UNIX paths <= 107 bytes).
    run = Path(tempfile.mkdtemp(prefix="brreadme"))
    env = {**os.environ, "BRAID_RUN_DIR": str(run)}
    env.pop("BRAID_SOCKET", None)
    script = "set -e\n" + readme_block()
    try:
        r = subprocess.run(["bash", "-c", script], cwd=work, env=env, capture_output=True,
                           text=True, timeout=400)
        # The same plane-1 capture with the cluster key only: its handshake is on plane 0.
        keyless = None
        if (work / "p1.pcap").exists() and r.returncode == 0:
            key = subprocess.run(["bash", "-c", f". .venv/bin/activate && braid testbed up "
                                  f"examples/two-hosts-4-planes.toml >/dev/null && braid trace "
                                  f"decode p1.pcap --key {run}/{NAME}/cluster.key --limit 20 "
                                  f"&& braid testbed down >/dev/null"], cwd=work, env=env,
                                 capture_output=True, text=True, timeout=120)
            keyless = key.stdout
    finally:
        left = _namespaces()
        if left:
            subprocess.run([str(REPO / ".venv/bin/braid"), "testbed", "down", "--all"],
                           env=env, capture_output=True, timeout=120)
    out = r.stdout
    assert r.returncode == 0, out[-4000:] + r.stderr[-4000:]
    assert left == [], f"the README's last line left namespaces behind: {left}"
    assert out.count("verified") >= 2, out  # both braid perf runs checked every byte
    assert "fault at" in out and "plane 2 down" in out, out
    assert '"verified": true' in out, out  # the --json run under braid testbed run
    decoded = [ln for ln in out.splitlines() if " plane=1 " in ln]
    assert len(decoded) == 5 and all("auth=ok" in ln for ln in decoded), out
    assert "verified: ok=" in out and "fail" not in out.split("verified: ok=")[1].split("\n")[0]
    assert (work / "p1.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # Without the key log the same packets cannot be opened: the key log did it.
    assert keyless is not None and "auth=nokey" in keyless and "auth=ok" not in keyless
    assert not run.joinpath(NAME).exists()
    shutil.rmtree(run, ignore_errors=True)
