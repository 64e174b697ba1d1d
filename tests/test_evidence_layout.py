"""The verdicts at a glance (`lab.studies.glance`): the table and the forest plot that open each evidence page, by hand."""


from lab.studies.glance import forest_svg, glance_table
from lab.studies.judging import Part
from lab.studies.pages import PageSetting
from lab.studies.verdicts import Claim, Judgement


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
