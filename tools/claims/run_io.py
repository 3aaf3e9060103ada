"""The orchestrator's side of a claims worker run: reading a worker's
pipe with a deadline, its result (inline or through its result file), and
firing a run's fault steps on time (tools/claims/fabric.py runs them)."""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import time
from pathlib import Path
from typing import Any


class _Lines:
    """Line reader over a pipe with a deadline (no thread, no unbounded wait)."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        self.fd = proc.stdout.fileno()
        self.buf = b""
        self.eof = False
        self.unparsed: list[str] = []  # lines that were neither ready nor a result

    def readline(self, deadline: float) -> str | None:
        while b"\n" not in self.buf and not self.eof:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            r, _, _ = select.select([self.fd], [], [], min(left, 0.5))
            if r:
                chunk = os.read(self.fd, 65536)
                if not chunk:
                    self.eof = True
                self.buf += chunk
        if b"\n" not in self.buf:
            line, self.buf = self.buf, b""
            return line.decode(errors="replace") if line else None
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode(errors="replace")


class _RunFailed(Exception):
    def __init__(self, host: int, result: dict[str, Any]) -> None:
        self.host, self.result = host, result


def _parse_result(line: str | None) -> dict[str, Any] | None:
    if not line or not line.startswith("{"):
        return None
    with contextlib.suppress(ValueError):
        obj = json.loads(line)
        if "result_file" in obj:  # the worker's usual answer (tools.claims.worker.main)
            try:
                obj = json.loads(Path(obj["result_file"]).read_text())
            except OSError as exc:
                return {"errors": [f"worker result file unreadable: {exc}"]}
        if "result" in obj:
            return dict(obj["result"])
    return None


def _fire(steps: list[tuple[float, str, Any]], go: float, fired: list[dict[str, Any]]) -> None:
    for at, label, fn in sorted(steps, key=lambda s: s[0]):
        for _ in range(100_000):  # bounded sleep until the step is due
            left = go + at - time.monotonic()
            if left <= 0:
                break
            time.sleep(min(left, 0.02))
        # t0: when the step started (a carrier fault takes effect inside it),
        # t: when it returned.
        t0 = round(time.monotonic() - go, 4)
        try:
            fn()
            fired.append({"t": round(time.monotonic() - go, 4), "t0": t0, "fault": label})
        except Exception as exc:  # reported with the run, never fatal
            fired.append({"t": round(time.monotonic() - go, 4), "t0": t0, "fault": label,
                          "error": str(exc)})
