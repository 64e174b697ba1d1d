"""The verdicts at a glance, at the top of every evidence page: one table (per claim part: the claim, the paper's
effect, ours with its 95 % interval, the power at the paper's effect, the verdict) and one forest plot of the same,
a plain SVG written here (no plotting library) so that the same records render the same bytes on every machine.
The numbers are the claims table's (`judging.claims_table`), only fewer of them. No study is named here.
"""

import math
from xml.sax.saxutils import escape

from .judging import Part, exploratory_label, power_text, verdict_text
from .markdown import interval, signed, table
from .verdicts import IDENTICAL, NO_TEST


# The forest plot's colour per verdict (colour-blind safe: Okabe-Ito), and the verdict word is printed beside it too.
VERDICT_COLOURS = {
    "reproduced": "#009E73",
    "reversed": "#D55E00",
    "not reproduced": "#CC79A7",
    "inconclusive": "#E69F00",
    NO_TEST: "#999999",
}
NOT_JUDGED_COLOUR = "#999999"
# Layout, in px: label column, plot column, verdict column, one row per part.
LABEL_WIDTH, PLOT_WIDTH, VERDICT_WIDTH, ROW_HEIGHT, TOP, BOTTOM = 430, 360, 300, 20, 40, 46
MAX_LABEL = 68  # characters of a row's label; longer ones are cut with "…" (the table above has them whole)


def forest_path(page_path: str) -> str:
    """Where a page's forest plot lives: beside the page, in the folder of its figures (``nsr.md`` ->
    ``nsr/forest.svg``)."""
    return page_path.removesuffix(".md") + "/forest.svg"


def part_label(p: Part) -> str:
    """A row's label: where first (task, setting), then the claim, so that a cut label keeps where it was judged."""
    where = f"{p.task}, {p.setting.name}" + (" (exploratory)" if p.exploratory else "")
    return f"{where}: {p.claim.name}"


def glance_table(parts: list[Part], figure: str, command: str) -> str:
    """The table and the figure that open an evidence page: one row per claim part, in the claims table's order; the
    figure (``figure``: its path relative to the page) below it, captioned with the command that renders it."""
    rows = []
    for p in parts:
        c, j = p.claim, p.judgement
        name = c.name + (f" *(exploratory: {exploratory_label(p.exploratory)})*" if p.exploratory else "")
        cells = [name, f"{p.task}, `{p.setting.name}`", c.to_exclude]
        if j is None:
            cells += ["-", "-", f"not judged: {p.not_judged}"]
        elif j.no_test == IDENTICAL:
            cells += ["+0.000 (identical arms)", "-", "**no test**"]
        else:
            verdict = verdict_text(j) + (f" (not counted: {p.excluded} this task)" if p.excluded else "")
            cells += [f"{signed(j.effect)} {interval(j)}", power_text(j), verdict]
        rows.append(cells)
    header = ["claim", "where", "the paper's effect", "ours [95 % interval]", "power at the paper's effect", "verdict"]
    lines = table(header, rows)
    lines += [
        "",
        (
            "![Forest plot of the claims above: per claim part, our effect and its 95 % interval as a bar, the "
            "paper's effect as a diamond, zero as a line, the verdict as colour and word. Rendered by "
            f"{command}]({figure})"
        ),
        "",
        (
            "*Each part's effect is signed so that the claimed direction is positive. The figure is rendered from "
            f"the records by `{command}`, and `--check` fails where it differs. The claims table below adds the two "
            "intervals that make each one, the minimum detectable effect and where each effect to exclude comes from.*"
        ),
    ]
    return "\n".join(lines)


def _x(value: float, low: float, high: float) -> float:
    return LABEL_WIDTH + (value - low) / (high - low) * PLOT_WIDTH


def _num(value: float) -> str:
    """A coordinate at one decimal: the same bytes on every machine (and no "-0.0")."""
    text = f"{value:.1f}"
    return "0.0" if text == "-0.0" else text


def _shown(value: float) -> float:
    """A value as the tables print it (3 decimals): the figure draws the table's numbers, so it is as deterministic as
    the table's text (a last-bit difference of a bootstrap on another CPU cannot move a coordinate)."""
    return round(value, 3)


def _ticks(low: float, high: float) -> list[float]:
    """Round tick values across ``[low, high]``: 4 to 8 of them, at a step of 1, 2 or 5 times a power of ten."""
    span = high - low
    for step in (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0):
        if span / step <= 8:
            break
    ticks, n = [], math.ceil(low / step - 1e-9)
    while n * step <= high + 1e-12:
        ticks.append(round(n * step, 6))
        n += 1
    return ticks


def forest_svg(parts: list[Part], title: str) -> str:
    """The forest plot of ``parts`` as SVG text: a row per part (its label cut to `MAX_LABEL` characters), our effect
    as a dot on its 95 % interval, the paper's effect (or the stated one; for a margin, the loss it excludes) as a
    diamond, a line at zero, the verdict as colour and word. Judged parts share one axis; a part that was not judged
    has its reason in place of a bar."""
    values = [0.0]
    for p in parts:
        if p.judgement is not None:
            values += [_shown(p.judgement.low), _shown(p.judgement.high)]
        values.append(_paper_marker(p))
    low, high = min(values), max(values)
    pad = 0.05 * (high - low or 1.0)
    low, high = low - pad, high + pad
    width = LABEL_WIDTH + PLOT_WIDTH + VERDICT_WIDTH
    height = TOP + ROW_HEIGHT * len(parts) + BOTTOM
    bottom = TOP + ROW_HEIGHT * len(parts)
    out = [
        (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12" role="img">'
        ),
        f"<title>{escape(title)}</title>",
        f'<rect width="{width}" height="{height}" fill="#ffffff"/>',
        f'<text x="4" y="16" font-weight="bold">{escape(title)}</text>',
        (
            f'<text x="{LABEL_WIDTH}" y="32" fill="#555555">effect, signed so that the claimed direction is positive '
            "(dot and bar: ours, 95 %; diamond: the paper's)</text>"
        ),
    ]
    for tick in _ticks(low, high):
        x = _num(_x(tick, low, high))
        out += [
            f'<line x1="{x}" y1="{TOP}" x2="{x}" y2="{bottom}" stroke="#eeeeee"/>',
            f'<text x="{x}" y="{bottom + 16}" text-anchor="middle" fill="#555555">{tick:+.2f}</text>',
        ]
    zero = _num(_x(0.0, low, high))
    out.append(f'<line x1="{zero}" y1="{TOP - 4}" x2="{zero}" y2="{bottom}" stroke="#000000" stroke-dasharray="4 3"/>')
    for i, p in enumerate(parts):
        y = TOP + ROW_HEIGHT * i + ROW_HEIGHT / 2
        label = part_label(p)
        label = label if len(label) <= MAX_LABEL else label[: MAX_LABEL - 1] + "…"
        verdict, colour = _verdict(p)
        out.append(f'<text x="4" y="{_num(y + 4)}">{escape(label)}</text>')
        j = p.judgement
        if j is not None and j.no_test != IDENTICAL:
            x1, x2, xe = (_num(_x(_shown(v), low, high)) for v in (j.low, j.high, j.effect))
            out += [
                f'<line x1="{x1}" y1="{_num(y)}" x2="{x2}" y2="{_num(y)}" stroke="{colour}" stroke-width="3"/>',
                f'<circle cx="{xe}" cy="{_num(y)}" r="4" fill="{colour}"/>',
            ]
        marker = _x(_paper_marker(p), low, high)
        diamond = " ".join(f"{_num(marker + dx)},{_num(y + dy)}" for dx, dy in ((0, -5), (5, 0), (0, 5), (-5, 0)))
        out.append(f'<polygon points="{diamond}" fill="none" stroke="#000000"/>')
        out.append(
            f'<text x="{LABEL_WIDTH + PLOT_WIDTH + 8}" y="{_num(y + 4)}" fill="{colour}">{escape(verdict)}</text>'
        )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _paper_marker(p: Part) -> float:
    """Where the paper's effect sits on the axis: the effect to exclude, or for a margin the loss it excludes."""
    c = p.claim
    return -c.margin if c.margin is not None else c.threshold


def _verdict(p: Part) -> tuple[str, str]:
    """A part's verdict word for the figure and its colour."""
    if p.judgement is None:
        return f"not judged ({p.not_judged})", NOT_JUDGED_COLOUR
    verdict = p.judgement.verdict
    word = verdict + (" (underpowered)" if p.judgement.underpowered else "")
    word += " (not counted)" if p.excluded else ""
    return word, VERDICT_COLOURS.get(verdict, NOT_JUDGED_COLOUR)
