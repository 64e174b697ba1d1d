"""The hand-written prose of the evidence pages, checked against what the pages render from their records.

Every number on an evidence page should come from its records. The tables, intervals and verdicts do: they sit in
rendered blocks (`markdown.fill`). The prose around them is written by hand, and a number there can drift from the
records or say more than they do. `unbacked_numbers` lists the numbers of a page's prose that nothing backs:

- a number that a rendered block of the same page prints is backed by the records (the prose restates it);
- an arXiv id (``2510.02230``) or a date (``2026-12-01``) is a reference, not a measurement;
- a number the caller declares (``declared``: each with the reason it needs no record, e.g. a setting declared in a
  study's code, which the caller checks against that code, or a paper's own number) is backed by that reason.

What is left is a number stated in prose alone: render it from the records, cite the block that has it, or remove
it. The test over the committed pages (``tests/test_evidence_prose.py``) fails on any such number. A limit, stated:
a small integer (a seed count, "3 of 100") matches almost any table, so the check guards measured values (decimals,
percentages, large counts) far better than small counts.
"""

import re

from .markdown import RENDERED_BLOCK


_FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_LINK_TARGET = re.compile(r"\]\([^)\s]*\)")
_HTML_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
_REFERENCE = re.compile(r"(?<![\w.])(?:\d{4}\.\d{4,5}|\d{4}-\d{2}-\d{2})(?![\w.])")
# A number: an optional sign, digits with an optional decimal part and exponent; not part of a word or of a longer
# number (so the 135 of "SmolLM2-135M" counts, the 2 of "SmolLM2" does not).
_NUMBER = re.compile(r"(?<![\w.])[-+−]?\d+(?:\.\d+)?(?:e[-+]?\d+)?(?![\d])")


def canonical(number: str) -> str:
    """One spelling of a number, so that ``0.50``, ``+0.5`` and ``5e-1`` compare equal: the float's shortest repr,
    with the sign dropped (prose says "below" or "−0.05" for the same value a table signs)."""
    value = abs(float(number.replace("−", "-")))
    return repr(int(value)) if value.is_integer() and value < 1e15 else repr(value)


def numbers_in(text: str) -> set[str]:
    """The canonical numbers (`canonical`) written in ``text``."""
    return {canonical(m.group()) for m in _NUMBER.finditer(text)}


def prose_of(page_text: str) -> str:
    """A page's hand-written prose: the text outside its rendered blocks, code fences, inline code, link targets,
    HTML comments and references (arXiv ids, dates)."""
    text = page_text
    for pattern in (RENDERED_BLOCK, _FENCE, _HTML_COMMENT, _INLINE_CODE, _LINK_TARGET, _REFERENCE):
        text = pattern.sub(_blank, text)
    return text


def _blank(match: re.Match) -> str:
    # keep the line breaks, so that a line number of the prose is the page's
    return " " + "\n" * match.group().count("\n")


def rendered_numbers(page_text: str) -> set[str]:
    """The numbers the page's rendered blocks print (`numbers_in` over each block's body)."""
    return set().union(*(numbers_in(m["body"]) for m in RENDERED_BLOCK.finditer(page_text)))


def unbacked_numbers(page_text: str, declared: dict[str, str] | None = None) -> list[tuple[str, int, str]]:
    """``(number, line number, line)`` for every number of the page's prose (`prose_of`) that no rendered block of the
    page prints and ``declared`` (number -> why it needs no record) does not name, in page order."""
    backed = rendered_numbers(page_text) | {canonical(n) for n in (declared or {})}
    out = []
    for index, line in enumerate(prose_of(page_text).splitlines(), start=1):
        for match in _NUMBER.finditer(line):
            if canonical(match.group()) not in backed:
                out.append((match.group(), index, line.strip()))
    return out
