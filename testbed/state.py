"""The run directory: every object a testbed creates is recorded here first.

``/run/braid/<name>/state.json`` lists namespaces, veths and processes in
creation order. It is written *before* each object is created, so after a
crash or Ctrl-C ``down`` still knows everything that may exist and removes it
(removing something that was never created is not an error).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from testbed.errors import TestbedError

DEFAULT_RUN_ROOT = Path(os.environ.get("BRAID_RUN_DIR", "/run/braid"))
NAME_RE = re.compile(r"[a-z][a-z0-9]{0,11}")


def check_name(name: str) -> str:
    if not NAME_RE.fullmatch(name):
        raise TestbedError(
            f"testbed name {name!r}: use 1-12 lowercase letters/digits, starting with a letter")
    return name


def prefix_for(name: str) -> str:
    """Namespace prefix: unique per testbed, so two testbeds never collide."""
    return f"br{name}-"


class RunState:
    def __init__(self, run_dir: Path, data: dict[str, Any]) -> None:
        self.run_dir = run_dir
        self.data = data

    @property
    def path(self) -> Path:
        return self.run_dir / "state.json"

    @classmethod
    def create(cls, run_root: Path, name: str, spec: dict[str, Any]) -> RunState:
        run_dir = run_root / name
        run_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(run_dir, 0o700)
        st = cls(run_dir, {"name": name, "prefix": prefix_for(name), "status": "building",
                           "spec": spec, "objects": [], "builder_pid": os.getpid()})
        st.save()
        return st

    @classmethod
    def load(cls, run_root: Path, name: str) -> RunState | None:
        run_dir = run_root / name
        try:
            data = json.loads((run_dir / "state.json").read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise TestbedError(f"unreadable testbed state {run_dir}/state.json: {exc}") from None
        return cls(run_dir, data)

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1))
        os.replace(tmp, self.path)

    def record(self, **obj: Any) -> dict[str, Any]:
        self.data["objects"].append(obj)
        self.save()
        return obj

    def objects(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.data["objects"] if o["type"] == kind]

    def set(self, **kw: Any) -> None:
        self.data.update(kw)
        self.save()


def list_names(run_root: Path = DEFAULT_RUN_ROOT) -> list[str]:
    if not run_root.is_dir():
        return []
    return sorted(p.parent.name for p in run_root.glob("*/state.json"))
