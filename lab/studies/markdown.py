"""Markdown primitives of the evidence pages: table rows, signed numbers and intervals, seed ranges, and `fill`, which
writes rendered blocks between their markers in a page's hand-written text, and `mean_sd`, the one "mean ± sd" cell of
every table. No study is named here."""

import math
import re
import statistics
from typing import TYPE_CHECKING


if TYPE_CHECKING:  # only a type here: the run loop's tables import this module, and `study --help` stays light
    from .verdicts import Judgement


def row(cells) -> str:
    return "| " + " | ".join(cells) + " |"


def marked(candidate, chosen) -> str:
    """A calibration table's candidate, in bold where it is the rule's choice."""
    return f"**{candidate}**" if candidate == chosen else str(candidate)


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    return [row(header), "|" + "---|" * len(header), *(row(cells) for cells in rows)]


def signed(value: float) -> str:
    return f"{value:+.3f}"


def interval(j: "Judgement") -> str:
    return f"[{signed(j.low)}, {signed(j.high)}]"


def seed_ranges(seeds) -> str:
    """Seeds as runs of consecutive numbers: ``[0, 1, 2, 3, 4, 7]`` -> ``"0-4,7"`` (a narrow table cell)."""
    runs: list[list[int]] = []
    for seed in sorted(seeds):
        if runs and seed == runs[-1][-1] + 1:
            runs[-1].append(seed)
        else:
            runs.append([seed])
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 2 else ",".join(map(str, r)) for r in runs)


# A rendered block as a page holds it: its opening marker (indented like the block), its body, its end marker.
RENDERED_BLOCK = re.compile(
    r"^(?P<indent>[ \t]*)<!-- rendered: (?P<id>\S+) -->\n(?P<body>.*?)^(?P=indent)<!-- end rendered -->$",
    re.MULTILINE | re.DOTALL,
)


def fill(text: str, blocks: dict[str, str], where: str = "page") -> str:
    """``text`` with every rendered block replaced by ``blocks[id]`` (indented like its marker). ``blocks`` are all the
    page's own: every marker must have a block, every block a marker (so that a block the page stops placing cannot
    vanish from it unnoticed), and no block may be placed twice."""
    unplaced = sorted(set(blocks) - set(BLOCK_IDS.findall(text)))
    if unplaced:
        raise ValueError(f"{where}: place these rendered blocks: {unplaced}.")
    seen = []

    def replace(match: re.Match) -> str:
        block_id, indent = match["id"], match["indent"]
        if block_id not in blocks:
            raise ValueError(f"{where}: no rendered block {block_id!r} (known: {sorted(blocks)}).")
        seen.append(block_id)
        body = "\n".join(indent + line if line else line for line in blocks[block_id].split("\n"))
        return f"{indent}<!-- rendered: {block_id} -->\n{body}\n{indent}<!-- end rendered -->"

    out = RENDERED_BLOCK.sub(replace, text)
    unclosed = sorted(set(BLOCK_IDS.findall(text)) - set(seen))
    if unclosed:  # an opening marker the block pattern did not match would otherwise stay empty, silently
        raise ValueError(f"{where}: close the rendered blocks {unclosed} with a line `<!-- end rendered -->`.")
    repeated = sorted({b for b in seen if seen.count(b) > 1})
    if repeated:
        raise ValueError(f"{where}: blocks {repeated} are placed more than once.")
    return out


BLOCK_IDS = re.compile(r"<!-- rendered: (\S+) -->")


def mean_sd(values, digits: int = 3, *, signed: bool = False, keep_nan: bool = False) -> str:
    """A table cell: the mean ± the sample sd of ``values`` at ``digits`` decimals; one value alone without its sd.

    ``None`` (a run that does not have the value) is always left out, and so is NaN unless ``keep_nan``: then a NaN
    makes the cell ``nan``, without an sd (the one-run cells of a rate table, where a missing measurement must stay
    visible). Nothing left: ``"n/a"``. ``signed``: the mean with its sign, ``+`` included (a change)."""
    kept = [v for v in values if v is not None and (keep_nan or not math.isnan(v))]
    if not kept:
        return "n/a"
    mean = f"{statistics.fmean(kept):{'+' if signed else ''}.{digits}f}"
    if len(kept) == 1 or any(math.isnan(v) for v in kept):  # the sd of one value, or of a NaN, is not a number
        return mean
    return f"{mean} ± {statistics.stdev(kept):.{digits}f}"


def fill_pages(texts: dict[str, str], blocks: dict[str, str]) -> dict[str, str]:
    """`fill` over a page and its detail pages (``texts``: path -> text): each block goes to the one file whose marker
    places it; every block must be placed in exactly one of them (a block moved to a detail page is then found
    there, and one that no file places, or two do, is refused)."""
    placed: dict[str, str] = {}
    for path, text in texts.items():
        for block_id in BLOCK_IDS.findall(text):
            if placed.setdefault(block_id, path) != path:
                raise ValueError(f"{path}: block {block_id!r} is placed in {placed[block_id]} too; place it once.")
    unplaced = sorted(set(blocks) - set(placed))
    if unplaced:
        raise ValueError(f"{', '.join(texts)}: place these rendered blocks: {unplaced}.")
    return {
        path: fill(text, {b: blocks[b] for b in blocks if placed[b] == path}, path) for path, text in texts.items()
    }
