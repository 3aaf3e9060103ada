"""The docs are a reference, not a lab notebook: the results pages stay short,
no line (of the docs, or of any tracked code or text) reads like a diary or
points at a tracker, every decision record has the same four parts, and every
relative link lands on a file in the repo."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
DECISIONS = DOCS / "decisions"

#: the three results pages, each: the current method, the current results with
#: commit and day, the reason for each rule, in 400 lines with the tables the
#: benches write between their markers.
RESULT_PAGES = ("claims.md", "benchmarks.md", "congestion.md")
MAX_LINES = 400

#: what a diary or a tracker leaves behind. History is in git; a reason that
#: matters is stated next to its rule or in a decision record.
FORBIDDEN = {
    "a dated session": re.compile(r"\b[Ss]ession \d"),
    "a sitting": re.compile(r"\b[Ss]itting"),
    "a tracker issue number": re.compile(r"\b[Ii]ssues? \d+"),
    "a tracker #number": re.compile(r"(?<![\w&/\"'])#\d+\b"),
    "a file that is not in the repo": re.compile(r"PROTOCOL-NOTES"),
}
#: a tracker number or a dated heading broken over two lines (of prose or of
#: a comment), which the line patterns above cannot see.
BROKEN = re.compile(r"\b(?:[Ii]ssues?|[Ss]ession)[ \t]*\n\s*(?:#:?|//|\*)?\s*#?\d")

#: tracked files where the words are data, not wording: the patterns and
#: their examples here, and a test that asserts a report lacks them.
WORDING_EXEMPT = frozenset({"tests/unit/test_docs_reference.py",
                            "tests/unit/test_claims_report.py"})

#: the headings every decision record has, in this order; each entry lists the
#: names accepted for it.
RECORD_HEADINGS = (("Context",), ("Choice", "Decision"), ("Evidence",),
                   ("Alternatives", "What lost", "What was tried"))

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def _markdown_files() -> list[Path]:
    return sorted([*DOCS.rglob("*.md"), ROOT / "README.md"])


def _tracked_text_files() -> list[Path]:
    """Every git-tracked ``*.py`` and ``*.md`` outside results/ (raw bench
    output) and :data:`WORDING_EXEMPT`."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--", "*.py", "*.md"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    names = [n for n in out.split("\0") if n]
    return [ROOT / n for n in sorted(names)
            if not n.startswith("results/") and n not in WORDING_EXEMPT
            and (ROOT / n).is_file()]


def _prose_lines(path: Path) -> list[tuple[int, str]]:
    """Every line with its number (code blocks included: a command there is
    read as much as the prose)."""
    return list(enumerate(path.read_text().splitlines(), 1))


def _records() -> list[Path]:
    return sorted(p for p in DECISIONS.glob("*.md") if re.match(r"\d{4}-", p.name))


@pytest.mark.parametrize("name", RESULT_PAGES)
def test_each_results_page_is_short(name: str) -> None:
    lines = (DOCS / name).read_text().count("\n")
    assert lines <= MAX_LINES, f"docs/{name} has {lines} lines (at most {MAX_LINES})"


def _wording(files: list[Path]) -> list[str]:
    """Every forbidden line of ``files``, and every tracker number or dated
    heading broken over two lines."""
    bad = [f"{p.relative_to(ROOT)}:{n}: {what}: {line.strip()[:80]}"
           for p in files for n, line in _prose_lines(p)
           for what, rx in FORBIDDEN.items() if rx.search(line)]
    for p in files:
        text = p.read_text()
        bad += [f"{p.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}: "
                f"broken over two lines: {m.group(0)!r}" for m in BROKEN.finditer(text)]
    return bad


def test_no_diary_or_tracker_wording_in_the_docs() -> None:
    bad = _wording(_markdown_files())
    assert not bad, "\n".join(bad)


def test_no_diary_or_tracker_wording_in_tracked_code_or_text() -> None:
    """Comments, docstrings and test names read like the docs: the whole
    text of every tracked Python and Markdown file is scanned."""
    files = _tracked_text_files()
    assert any(p.suffix == ".py" for p in files) and any(p.suffix == ".md" for p in files)
    bad = _wording(files)
    assert not bad, "\n".join(bad)


def test_the_forbidden_patterns_catch_what_they_are_for() -> None:
    hits = {what: [s for s in ("Session 17 (2026-12-03)", "in the thirty-sixth sitting",
                               "as issue 13 asks", "aioquic #42", "PROTOCOL-NOTES says")
                   if rx.search(s)]
            for what, rx in FORBIDDEN.items()}
    assert all(len(v) == 1 for v in hits.values()), hits
    for fine in ("an encrypted session (handshake)", "85 receiver sessions",
                 "[claims](claims.md#results)", "colour &#8212;", "plane 2 of 4",
                 "start_new_session=True", 'color="#888888"', "new_session(3)"):
        assert not any(rx.search(fine) for rx in FORBIDDEN.values()), fine
    for broken in ("as issue\n13 asks", "(issue\n#: 13's row)", "in Session\n  # 4 we"):
        assert BROKEN.search(broken), broken
    for fine in ("an encrypted session\n\n## 3. Frames", "the issue\n#: of 3 planes",
                 "start_new_session=True)\n    n = 2"):
        assert not BROKEN.search(fine), fine


def test_there_are_decision_records_and_an_index() -> None:
    records = _records()
    assert len(records) >= 10
    numbers = [p.name[:4] for p in records]
    assert len(set(numbers)) == len(numbers), "two records share a number"
    index = (DECISIONS / "README.md").read_text()
    missing = [p.name for p in records if f"]({p.name})" not in index]
    assert not missing, f"not in docs/decisions/README.md: {missing}"


@pytest.mark.parametrize("record", _records(), ids=lambda p: p.name)
def test_every_decision_record_has_its_four_parts(record: Path) -> None:
    text = record.read_text()
    assert text.startswith(f"# {record.name[:4]}. ") or text.startswith("# "), record.name
    headings = [m.group(1).strip() for m in re.finditer(r"^## (.+)$", text, re.M)]
    found = []
    for names in RECORD_HEADINGS:
        at = [i for i, h in enumerate(headings) if h.startswith(names)]
        assert at, f"{record.name}: no '## {names[0]}' heading (has {headings})"
        found.append(at[0])
    assert found == sorted(found), f"{record.name}: headings out of order: {headings}"
    for i, names in enumerate(RECORD_HEADINGS):  # each part says something
        start = text.index("## " + headings[found[i]])
        end = (text.index("## " + headings[found[i + 1]]) if i + 1 < len(found)
               else len(text))
        body = text[start:end].split("\n", 1)[1].strip()
        assert len(body) > 40, f"{record.name}: '{names[0]}' is empty"


def test_every_relative_link_in_the_docs_resolves() -> None:
    broken = []
    for p in _markdown_files():
        in_code = False
        for n, line in _prose_lines(p):
            if FENCE.match(line):
                in_code = not in_code
                continue
            if in_code:
                continue
            for target in LINK.findall(line):
                if re.match(r"[a-z]+:", target) or target.startswith("#"):
                    continue  # a URL or an anchor on the same page
                path = target.split("#", 1)[0]
                if not (p.parent / path).exists():
                    broken.append(f"{p.relative_to(ROOT)}:{n}: {target}")
    assert not broken, "\n".join(broken)


def test_one_current_section_per_bench() -> None:
    """``--update-docs`` replaces the section between a bench's markers; two
    copies, or a variant's own section, would leave an old result standing."""
    for page, expected in (("claims.md", {"claims"}),
                           ("benchmarks.md", {"wire", "trace", "sim", "goodput",
                                              "goodput-budget", "endpoint"})):
        text = (DOCS / page).read_text()
        begins = re.findall(r"<!-- bench:([\w.-]+):begin -->", text)
        ends = re.findall(r"<!-- bench:([\w.-]+):end -->", text)
        assert sorted(begins) == sorted(ends), page
        assert len(begins) == len(set(begins)), f"{page}: a section appears twice"
        assert expected <= set(begins), f"{page}: missing {expected - set(begins)}"
        if page == "claims.md":
            assert set(begins) == {"claims"}, f"variant sections in claims.md: {begins}"
