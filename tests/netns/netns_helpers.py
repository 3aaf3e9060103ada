"""Helpers shared by the namespace tests (imported as a top-level module)."""

from __future__ import annotations

import subprocess
import sys


def udptool(*args: str) -> list[str]:
    return [sys.executable, "-m", "testbed.udptool", *args]


def ns_list() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                         timeout=10).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def links_root() -> str:
    return subprocess.run(["ip", "-o", "link"], capture_output=True, text=True,
                          timeout=10).stdout
