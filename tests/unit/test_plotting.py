"""Plot helpers: fault lanes (one row per target, bars for impairments), labels
placed so they never overlap, a y range an initial value cannot squash."""

from __future__ import annotations

from tools.common.plotting import (
    Bar,
    fault_lanes,
    fault_spans,
    label_rows,
    robust_ylim,
    split_fault,
)


def test_split_fault() -> None:
    assert split_fault("spine s1 plane 0 reboot 500ms") == ("spine s1 plane 0", "reboot 500ms")
    assert split_fault("link h3:p1 loss 5%") == ("link h3:p1", "loss 5%")
    assert split_fault("gibberish") == ("gibberish", "")


def test_demo_timeline_lanes() -> None:
    events = [(2.0, "plane 2 down"), (4.0, "spine s1 plane 0 reboot 500ms"),
              (5.0, "link h1:p1 gray up 100%"), (6.0, "link h3:p3 loss 5%"),
              (7.0, "link h0:p0 flap 200ms for 1s"), (9.0, "plane 2 up"),
              (9.0, "link h1:p1 heal"), (9.0, "link h3:p3 heal")]
    lanes = dict(fault_lanes(events, end=16.0))
    # the three faults that fire at 9 s must not stack their tags on one spot:
    # each target has its own row and its bar ends there
    assert list(lanes) == ["plane 2", "spine s1 plane 0", "link h1:p1", "link h3:p3",
                           "link h0:p0"]
    assert lanes["plane 2"] == [Bar(2.0, 9.0, "down", "down")]
    assert lanes["spine s1 plane 0"] == [Bar(4.0, 4.5, "reboot 500ms", "reboot")]
    assert lanes["link h0:p0"] == [Bar(7.0, 8.0, "flap 200ms for 1s", "flap")]
    assert lanes["link h3:p3"][0].end == 9.0
    assert fault_spans(list(lanes.items())) == [(2.0, 9.0)]


def test_an_unhealed_fault_runs_to_the_end() -> None:
    (target, bars), = fault_lanes([(1.0, "plane 0 down")], end=5.0)
    assert target == "plane 0"
    assert bars[0].end == 5.0 and "not healed" in bars[0].label


def test_labels_in_a_row_never_overlap() -> None:
    marks = [(t, "link h1:p1 heal") for t in (9.0, 9.0, 9.0, 9.1, 12.0)]
    rows = label_rows(marks, x_per_char=0.1)
    spans: dict[int, list[tuple[float, float]]] = {}
    for (t, lab), r in zip(marks, rows, strict=True):
        for a, b in spans.get(r, []):
            assert t >= b or t + (len(lab) + 2) * 0.1 <= a
        spans.setdefault(r, []).append((t, t + (len(lab) + 2) * 0.1))
    assert len(set(rows[:4])) == 4 and rows[4] == 0


def test_an_initial_value_does_not_squash_the_range() -> None:
    values = [1_000_000.0] + [50_000.0 + (i % 10) * 1000 for i in range(99)]
    lo, hi = robust_ylim(values)
    assert lo <= 50_000 and 59_000 <= hi < 100_000
    assert robust_ylim([]) == (0.0, 1.0)
    lo, hi = robust_ylim([5.0] * 10)
    assert lo < 5.0 < hi
