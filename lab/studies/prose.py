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

`contradicted_sentences` checks the words: a sentence that names one claim by its number ("claim 6") and a verdict
word that the page's rendered tables do not print for that claim, or that says a claim with rows was "not run" or
that "neither arm improved", contradicts the page. Its limits, stated: it reads only claims named by number (a
sentence about "SELF's boundary group" is not tied to its claims; of a range, "claims 10-12c", its two ends), a sentence naming two claims is not judged, and a
sentence about history ("before", "was", "v2", "v3") is left alone; on the index, claim numbers of different studies
share a number, so a word is checked against all of them.

`false_selection_sentences` checks what a page says of how its design was chosen: a sentence saying that no choice
read the problems a setting is judged on ("no choice behind this design read a held-out problem", "nothing in it is
chosen by looking at a result") fails where that setting declares otherwise (`PageSetting.selected_on_test`). It
reads the sentences of the sections (heading to heading) that hold one of the setting's rendered blocks, or the whole
page where every setting of the page declares it; its limit, stated: only the phrasings of `_NO_SELECTION`.
"""

import itertools
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


# The verdict words of the rule, longest first (so "not reproduced" is not read as "reproduced").
_VERDICT_WORDS = ("not reproduced", "reproduced", "reversed", "inconclusive", "no test", "mixed")
_VERDICT = re.compile(r"\b(" + "|".join(_VERDICT_WORDS) + r")\b")
_CLAIM_NAME = re.compile(r"^\*{0,2}(\d+[a-z]?)\. ")
_CLAIM_REF = re.compile(r"\bclaims? (\d+[a-z]?)\b(?!\s*[-–,]\s*\d)", re.IGNORECASE)
_CLAIM_ANY = re.compile(r"\bclaims? (\d+[a-z]?)\b(?:\s*[-–]\s*(\d+[a-z]?)\b)?", re.IGNORECASE)
_NOT_RUN = re.compile(r"\b(?:not run|never run|neither arm improved|neither improved)\b", re.IGNORECASE)


def table_verdicts(page_text: str) -> dict[str, set[str]]:
    """Per claim number ("3", "12c"), the verdict words its rows in the page's rendered tables print (a table with a
    column named "claim" and one whose name starts with "verdict"); a mixed claim gives every word of its counts."""
    found: dict[str, set[str]] = {}
    for block in RENDERED_BLOCK.finditer(page_text):
        lines = [line.strip() for line in block["body"].splitlines()]
        for i, line in enumerate(lines):
            if not line.startswith("|") or i + 1 >= len(lines) or not lines[i + 1].startswith("|---"):
                continue
            header = [cell.strip() for cell in line.strip("|").split("|")]
            if "claim" not in header or not any(h.startswith("verdict") for h in header):
                continue
            claim_at = header.index("claim")
            verdict_at = next(k for k, h in enumerate(header) if h.startswith("verdict"))
            for row in lines[i + 2 :]:
                if not row.startswith("|"):
                    break
                cells = [cell.strip() for cell in row.strip("|").split("|")]
                name = _CLAIM_NAME.match(cells[claim_at]) if len(cells) > max(claim_at, verdict_at) else None
                if name:
                    found.setdefault(name[1], set()).update(_VERDICT.findall(cells[verdict_at].replace("*", "")))
    return found


_SENTENCE = re.compile(r"[^.;]+(?:[.;](?=\s|$)|$)|[.;]", re.DOTALL)


def _sentences(text: str):
    """``(line number, sentence)`` of prose ``text``: the runs between full stops and semicolons that end a word (a
    decimal point does not end one) and blank lines, whitespace folded."""
    for paragraph in re.finditer(r"(?:.+\n?)+", text):
        start_line = text.count("\n", 0, paragraph.start()) + 1
        for match in _SENTENCE.finditer(paragraph.group()):
            sentence = " ".join(match.group().split())
            if sentence:
                yield start_line + paragraph.group().count("\n", 0, match.start()), sentence


def contradicted_sentences(page_text: str) -> list[tuple[int, str, str]]:
    """``(line, sentence, why)`` for every sentence of the page's prose (`prose_of`) that contradicts its rendered
    tables (`table_verdicts`): a sentence that names one claim and a verdict word its rows do not print (a sentence
    about a rule change, which names a verdict the claim had before, says "before", "was", "v2" or "v3", and is
    left alone), or that says a claim with rows in the tables was "not run" or that "neither arm improved"."""
    verdicts = table_verdicts(page_text)
    out = []
    for sentence_line, sentence in _sentences(prose_of(page_text)):
        if _NOT_RUN.search(sentence):  # any claim it names, a range's first included ("claims 10-12c")
            ends = [c for pair in _CLAIM_ANY.findall(sentence) for c in pair if c]
            named = [c for c in dict.fromkeys(ends) if c in verdicts]
            if named:
                out.append((sentence_line, sentence, f"claim {named[0]} has rows in the page's tables"))
            continue
        claims = [c for c in dict.fromkeys(_CLAIM_REF.findall(sentence)) if c in verdicts]
        if len(claims) != 1 or re.search(r"\bclaims\b", sentence, re.IGNORECASE):  # several claims: not judged
            continue
        (claim,) = claims
        if re.search(r"\b(?:before|was|were|v2|v3|previous|earlier)\b", sentence):
            continue
        said = set(_VERDICT.findall(sentence)) - verdicts[claim]
        if said:
            why = f"claim {claim}: {sorted(said)} against the table's {sorted(verdicts[claim])}"
            out.append((sentence_line, sentence, why))
    return out


# A sentence saying that nothing behind a design was chosen on its test problems or by looking at a result.
_NO_SELECTION = re.compile(
    r"\bno choice\b[^.;]*\bread\b[^.;]*\b(?:held-out|test) problems?\b"
    r"|\bnothing\b[^.;]*\b(?:chosen|selected)\b[^.;]*\b(?:looking|held-out|test problems?)\b"
    r"|\bnot (?:chosen|selected) on (?:the|these|any|a) (?:held-out|test) problems?\b",
    re.IGNORECASE,
)
_HEADING = re.compile(r"^#{1,6} ", re.MULTILINE)


def false_selection_sentences(page_text: str, study: str, settings) -> list[tuple[int, str, str]]:
    """``(line, sentence, why)`` for every sentence of the page's prose that says no choice read the problems it is
    judged on (`_NO_SELECTION`), in a section of a setting of ``settings`` (the `PageSetting` objects of ``study``'s page)
    that declares a choice on them (``selected_on_test``): a section (heading to heading) holding one of the setting's
    rendered blocks (``<study>:<setting>:...``), or the whole page where every setting declares one."""
    selected = [s for s in settings if getattr(s, "selected_on_test", "")]
    if not selected:
        return []
    whole_page = len(selected) == len(settings)
    starts = [0] + [m.start() for m in _HEADING.finditer(page_text)] + [len(page_text)]
    in_scope = []  # (first line, last line, the setting's reason) of each section in scope
    for start, end in itertools.pairwise(starts):
        section = page_text[start:end]
        held = [s for s in selected if f"<!-- rendered: {study}:{s.name}:" in section]
        if whole_page or held:
            first = page_text.count("\n", 0, start) + 1
            in_scope.append((first, first + section.count("\n"), (held or selected)[0].selected_on_test))
    out = []
    for line, sentence in _sentences(prose_of(page_text)):
        scope = next((reason for first, last, reason in in_scope if first <= line <= last), None)
        if scope is not None and _NO_SELECTION.search(sentence):
            out.append((line, sentence, f"the design declares a choice on these problems: {scope.split(': ')[0]}"))
    return out
