"""The EV state diagram in docs/state-machines.md matches the transition table."""

from __future__ import annotations

import enum
from pathlib import Path

import pytest

from tools.docs import state_diagrams as gen
from transport.ev_state import TRANSITIONS


def test_doc_is_up_to_date() -> None:
    assert gen.DOC.exists(), "run python -m tools.docs.state_diagrams"
    text = gen.DOC.read_text()
    assert gen.render(text) == text, "stale: run python -m tools.docs.state_diagrams"
    assert gen.main(["--check"]) == 0


def test_every_transition_is_drawn() -> None:
    diagram = gen.mermaid_state_diagram(TRANSITIONS)
    for (state, event), new in TRANSITIONS.items():
        edge = next(
            line
            for line in diagram.splitlines()
            if line.strip().startswith(f"{state.name} --> {new.name}:")
        )
        assert event.value in edge


class _Door(enum.Enum):
    OPEN = "open"
    SHUT = "shut"


def test_generic_table_and_markers(tmp_path: Path) -> None:
    table = {(_Door.OPEN, "push"): _Door.SHUT, (_Door.SHUT, "pull"): _Door.OPEN}
    assert gen.mermaid_state_diagram(table, _Door.SHUT).splitlines() == [
        "stateDiagram-v2",
        "    [*] --> SHUT",
        "    OPEN --> SHUT: push",
        "    SHUT --> OPEN: pull",
    ]
    sections = {"door": lambda: "DRAWN"}
    doc = "a\n<!-- door:begin -->\nold\n<!-- door:end -->\nb\n"
    assert gen.render(doc, sections) == "a\n<!-- door:begin -->\nDRAWN\n<!-- door:end -->\nb\n"
    with pytest.raises(ValueError, match="door:begin"):
        gen.render("no markers", sections)
    stale = tmp_path / "sm.md"
    stale.write_text(
        "<!-- ev-states:begin -->\nold\n<!-- ev-states:end -->\n"
        "<!-- conn-states:begin -->\nold\n<!-- conn-states:end -->\n"
    )
    assert gen.main(["--check", "--doc", str(stale)]) == 1
    assert gen.main(["--doc", str(stale)]) == 0
    assert gen.main(["--check", "--doc", str(stale)]) == 0
