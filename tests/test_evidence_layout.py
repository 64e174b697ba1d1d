"""The evidence a reader takes in at a glance: every study's page opens with its verdicts (the table and the forest
plot of `lab.studies.glance`) before any design or rule text; the index's first block is every method's verdicts; no
evidence page is over 60 KB, the index is under 25 KB, and each method page's evidence box is at most 10 lines. The
figures themselves are checked against their records with the pages (tests/test_study_report.py)."""

import re
from pathlib import Path

import pytest

from lab.studies.glance import forest_path, forest_svg, glance_table
from lab.studies.judging import Part
from lab.studies.markdown import BLOCK_IDS
from lab.studies.pages import PageSetting
from lab.studies.report import INDEX, PAGES
from lab.studies.verdicts import Claim, Judgement


ROOT = Path(__file__).resolve().parents[1]
EVIDENCE = ROOT / "docs" / "evidence"
PAGE_LIMIT, INDEX_LIMIT, BOX_LINES = 60_000, 25_000, 10
# The admonition that holds a method page's rendered verdicts, up to the first line outside it.
BOX = re.compile(r'^!!! info "Evidence"\n(?:(?: {4}.*)?\n)*', re.MULTILINE)


@pytest.mark.parametrize("page", sorted(str(p.relative_to(EVIDENCE)) for p in EVIDENCE.rglob("*.md")))
def test_no_evidence_page_is_over_its_limit(page):
    size = len((EVIDENCE / page).read_bytes())
    limit = INDEX_LIMIT if page == "index.md" else PAGE_LIMIT
    assert size < limit, f"docs/evidence/{page} is {size} bytes, over {limit}: move detail to a detail page"


@pytest.mark.parametrize("study", sorted(PAGES))
def test_each_study_page_opens_with_its_verdicts_and_forest_plot(study):
    page = PAGES[study]
    text = (ROOT / page.path).read_text()
    assert BLOCK_IDS.findall(text)[0] == f"{study}:glance", "the verdicts come first"
    before = text[: text.index(f"<!-- rendered: {study}:glance -->")]
    headings = re.findall(r"^#+ .*$", before, re.MULTILINE)
    assert headings[1:] == ["## Verdicts at a glance"], f"nothing but the title comes before the verdicts: {headings}"
    assert len(before.splitlines()) <= 12, "the verdicts are on the first screen"
    assert f"]({Path(forest_path(page.path)).relative_to(Path(page.path).parent)})" in text
    assert (ROOT / forest_path(page.path)).is_file()
    for detail in page.details:  # a detail page is reached from its page and leads back to it
        assert Path(detail).relative_to(Path(page.path).parent).as_posix() in text
        assert f"](../{Path(page.path).name})" in (ROOT / detail).read_text()


def test_the_index_opens_with_every_methods_verdicts():
    text = (ROOT / INDEX).read_text()
    assert BLOCK_IDS.findall(text)[0] == "index:glance"
    before = text[: text.index("<!-- rendered: index:glance -->")]
    assert len(before.splitlines()) <= 8 and "\n## " not in before
    block = text.split("<!-- rendered: index:glance -->", 1)[1].split("<!-- end rendered -->", 1)[0]
    for study, page in PAGES.items():
        assert f"]({Path(page.path).name})" in block, f"the index's first table lists {study}'s claims"


def test_each_method_page_evidence_box_is_at_most_ten_lines():
    boxes = {}
    for path in sorted((ROOT / "docs" / "methods").glob("*.md")):
        text = path.read_text()
        if "<!-- rendered: evidence" not in text:
            continue
        (box,) = BOX.findall(text)  # one box per page
        assert "<!-- rendered: evidence -->" in box and text.count("<!-- rendered: evidence") == 1, path.name
        boxes[path.name] = len(box.rstrip("\n").splitlines())
    assert boxes and all(lines <= BOX_LINES for lines in boxes.values()), boxes
    summarised = {Path(s.path).name for page in PAGES.values() for s in page.method_summaries}
    assert set(boxes) == summarised


def _part(claim: Claim, task: str, judgement: Judgement | None, not_judged: str = "") -> Part:
    return Part("s", claim, PageSetting("main", "m", ()), task, claim.baseline, judgement, not_judged)


def _judgement(claim: Claim, effect: float, low: float, high: float, verdict: str, power: float) -> Judgement:
    return Judgement(claim, effect, low, high, 0.1, 5, 100, verdict, power=power, interval_verdict=verdict)


def test_forest_plot_places_interval_effect_and_paper_marker_by_hand():
    claim = Claim("1. A beats B", "a", "b", "pass@1", paper_effect=0.3)
    parts = [
        _part(claim, "toy", _judgement(claim, 0.1, 0.0, 0.2, "inconclusive", 0.4)),
        _part(claim, "gym", None, "pending: 2 of 5 declared seeds"),
    ]
    svg = forest_svg(parts, "S: every claim part")
    # the axis spans [0, 0.3] (0, the interval, the paper's effect) padded by 5 % of its span: [-0.015, 0.315], so a
    # value v sits at x = 430 + (v + 0.015) / 0.33 * 360 and row i at y = 40 + 20 i + 10
    assert '<line x1="446.4" y1="50.0" x2="664.5" y2="50.0" stroke="#E69F00" stroke-width="3"/>' in svg
    assert '<circle cx="555.5" cy="50.0" r="4" fill="#E69F00"/>' in svg
    assert '<polygon points="773.6,45.0 778.6,50.0 773.6,55.0 768.6,50.0" fill="none" stroke="#000000"/>' in svg
    assert 'stroke-dasharray="4 3"' in svg and '<line x1="446.4" y1="36"' in svg  # the zero line
    assert ">inconclusive (underpowered)</text>" in svg  # power 40 % < 50 %
    assert ">toy, main: 1. A beats B</text>" in svg and ">not judged (pending: 2 of 5 declared seeds)</text>" in svg
    assert svg.count("<circle") == 1  # the pending part has no bar
    assert forest_svg(parts, "S: every claim part") == svg  # the same parts, the same bytes
    assert "&lt;b&gt;" in forest_svg([_part(Claim("<b>", "a", "b", "pass@1", paper_effect=0.3), "t", None, "x")], "t")


def test_glance_table_rows_by_hand():
    claim = Claim("2. A keeps B", "a", "b", "pass@1", margin=0.05)
    parts = [
        _part(claim, "toy", _judgement(claim, -0.02, -0.04, 0.00, "not reproduced", 0.9)),
        _part(claim, "gym", None, "no run"),
    ]
    text = glance_table(parts, "s/forest.svg", "python -m lab study report s")
    lines = text.splitlines()
    assert lines[0] == (
        "| claim | where | the paper's effect | ours [95 % interval] | power at the paper's effect | verdict |"
    )
    assert lines[2] == (
        "| 2. A keeps B | toy, `main` | -0.050 (margin) | -0.020 [-0.040, +0.000] | 90 % (margin, arms equal) | "
        "**not reproduced** |"
    )
    assert lines[3] == "| 2. A keeps B | gym, `main` | -0.050 (margin) | - | - | not judged: no run |"
    assert "](s/forest.svg)" in text and "`python -m lab study report s`" in text
