"""A claim's verdict over its parts (`group_verdict`; parts with no test do not count), the index's verdict table,
the list of claims whose verdict the current rule moved from the previous one (each page's ``previous_verdicts``), and
a method page's evidence summary. No study is named here: a page's own labels and history come with its `Page`.
"""

from pathlib import Path

from .judging import Part, exploratory_label, power_text, verdict_text
from .markdown import interval, row, signed
from .pages import MethodSummary, Page
from .verdicts import IDENTICAL, NO_TEST


def _verdict(p: Part, v3: bool) -> str:
    """A part's verdict under the current rule, or (``v3``) of its interval alone, as the crossed rule (v3) gave it."""
    return p.judgement.interval_verdict if v3 else p.judgement.verdict


def _combined(parts: list[Part], v3: bool = False) -> str:
    """The one verdict the judged parts share, or "mixed" with the count of each; a part with no test (identical arms,
    no headroom, mechanism did not act) gives no verdict and does not count, unless no part has one."""
    judged = [_verdict(p, v3) for p in parts if p.judgement]
    if not judged:  # why not (e.g. "pending: 2 of 5 declared seeds")
        reasons = list(dict.fromkeys(p.not_judged for p in parts if p.not_judged))
        return "not judged" + (f" ({'; '.join(reasons)})" if reasons else "")
    tested = [v for v in judged if v != NO_TEST]
    if tested and len(tested) < len(judged):
        untested = len(judged) - len(tested)
        verdict = _combined_verdicts(tested)
        causes = [IDENTICAL if v3 else p.judgement.no_test.split(":")[0] for p in parts if p.judgement]
        causes = ", ".join(dict.fromkeys(c for c in causes if c))
        return f"{verdict} ({untested} part{'s' * (untested > 1)} with no test: {causes})"
    return _combined_verdicts(judged)


def _combined_verdicts(judged: list[str]) -> str:
    counts = {v: judged.count(v) for v in dict.fromkeys(judged)}
    return judged[0] if len(counts) == 1 else "mixed (" + ", ".join(f"{n} {v}" for v, n in counts.items()) + ")"


def group_verdict(parts: list[Part], v3: bool = False) -> str:
    """A claim's verdict from its parts: the one verdict they share, or "mixed" with the count of each. Parts set after
    looking (exploratory) do not count towards it; they get their own, labelled, after it. A claim with only
    exploratory parts gets their verdict, labelled exploratory. ``v3``: from the parts' interval verdicts alone (the
    crossed rule's, before v4 said what the design could see), and without v4's declared selections."""
    counted = [p for p in parts if not p.excluded]
    registered = [p for p in counted if not p.exploratory_at(v3)]
    exploratory = [p for p in counted if p.exploratory_at(v3)]
    reasons = [reason for p in exploratory for reason in p.exploratory_at(v3).splitlines()]
    labels = ", ".join(dict.fromkeys(exploratory_label(reason) for reason in reasons))
    if not counted:
        reasons: dict[str, list[str]] = {}
        for p in parts:
            reasons.setdefault(p.excluded, []).append(p.task)
        return "**no test** (" + "; ".join(f"{r} {', '.join(dict.fromkeys(t))}" for r, t in reasons.items()) + ")"
    if not registered:
        return f"**{_combined(exploratory, v3)}**, exploratory ({labels})"
    verdict = f"**{_combined(registered, v3)}**"
    if exploratory and any(p.judgement for p in exploratory):
        verdict += f"; exploratory ({labels}): {_combined(exploratory, v3)}"
    return verdict


def _part_summary(p: Part, with_arms: bool) -> str:
    where = f"{p.task}, {p.setting.name}" + (f", {p.claim.arm} − {p.baseline} {p.claim.metric}" if with_arms else "")
    where += " (exploratory)" if p.exploratory else ""
    if p.judgement is None:
        return f"{where}: not judged ({p.not_judged})"
    j = p.judgement
    if j.no_test == IDENTICAL:
        summary = f"{where}: identical arms, no test"
    else:
        summary = f"{where}: {signed(j.effect)} {interval(j)}, MDE {j.minimum_detectable_effect:.3f}"
        summary += f", power {power_text(j)}" if j.claim.paper_effect is not None else ""
        summary += f", power {100 * j.power:.0f} % (stated effect)" if j.claim.smallest_effect is not None else ""
        summary += f", power {100 * j.power:.0f} % (margin, arms equal)" if j.claim.margin is not None else ""
        summary += f", {verdict_text(j).replace('**', '')}"
    return summary + (f" (not counted: {p.excluded} {p.task})" if p.excluded else "")


def claim_groups(parts: list[Part]) -> dict[str, list[Part]]:
    """The parts by claim (a claim's own name, or the claim its parts belong to), in order of first appearance."""
    groups: dict[str, list[Part]] = {}
    for p in parts:
        groups.setdefault(p.claim.part_of or p.claim.name, []).append(p)
    return groups


def index_table(parts_by_study: dict[str, list[Part]], pages: dict[str, Page]) -> str:
    """The index's verdict table: one row per claim (group) of every study, in the order of ``pages``."""
    header = [
        "method",
        "claim",
        "verdict (the rule)",
        "parts: effect [95 % interval], MDE, power at the paper's effect, verdict",
        "before (v2 rule)",
        "page",
    ]
    lines = [row(header), "|" + "---|" * len(header)]
    for study_name, parts in parts_by_study.items():
        page = pages[study_name]
        for group, members in claim_groups(parts).items():
            with_arms = len({(p.claim.arm, p.baseline, p.claim.metric) for p in members}) > 1
            summary = "; ".join(_part_summary(p, with_arms) for p in members)
            cells = [
                page.method_of_claim.get(members[0].claim.name)
                or page.method_of_arm.get(members[0].claim.arm, page.label),
                group,
                group_verdict(members),
                summary,
                page.previous_verdicts.get(group, "-"),
                f"[{study_name}]({Path(page.path).name})",
            ]
            lines.append(row(cells))
    return "\n".join(lines)


def index_glance(parts_by_study: dict[str, list[Part]], pages: dict[str, Page]) -> str:
    """The index's first screen: every study's claims, one row each, with the verdict of the rule and its page (the
    parts, their intervals and power are on the page, at its top, and in the rule page's table)."""
    lines = [row(["method", "claim", "verdict (the rule)", "evidence"]), "|---|---|---|---|"]
    for study_name, parts in parts_by_study.items():
        page = pages[study_name]
        link = f"[{page.title or study_name}]({Path(page.path).name})"
        for group, members in claim_groups(parts).items():
            method = page.method_of_claim.get(members[0].claim.name) or page.method_of_arm.get(
                members[0].claim.arm, page.label
            )
            lines.append(row([method, group, group_verdict(members), link]))
    return "\n".join(lines)


def rule_changes(parts_by_study: dict[str, list[Part]], pages: dict[str, Page]) -> str:
    """The claims whose verdict under the crossed rule (v3: the interval alone) differs from the one the rule before it
    gave (each page's ``previous_verdicts``), as a list: the claim, its page, the verdict before and then (rendered,
    so the list cannot drift from the table)."""
    lines = []
    for study_name, parts in parts_by_study.items():
        page = pages[study_name]
        for group, members in claim_groups(parts).items():
            now, before = group_verdict(members, v3=True).replace("**", ""), page.previous_verdicts.get(group)
            if before is not None and now != before:
                lines.append(f"- {group} ([{study_name}]({Path(page.path).name})): {before} → **{now}**")
    return "\n".join(lines) if lines else "- none"


def design_rule_changes(
    parts_by_study: dict[str, list[Part]], pages: dict[str, Page], page_changes: list[str] = ()
) -> str:
    """Each claim with a part whose verdict v4's words (what the design could see: reversed, no headroom, mechanism
    gate) move from the interval's own verdict (v3): the claim's verdict old → new, then each such part, old → new
    and why; and each claim that a declared selection on its test problems makes exploratory
    (`PageSetting.selected_on_test`; its verdict line says so); rendered from the judgements, so the list cannot drift
    from the tables. ``page_changes``: the lines of
    the verdicts outside the claims that v4 moved (a page's own ``rule_changes`` block: SELF's mechanisms), last."""
    lines = []
    for study_name, parts in parts_by_study.items():
        link = f"[{study_name}]({Path(pages[study_name].path).name})"
        for group, members in claim_groups(parts).items():
            moved = [p for p in members if p.judgement and p.judgement.verdict != p.judgement.interval_verdict]
            if not moved and not any(p.setting.selected_on_test for p in members):
                continue
            old, new = group_verdict(members, v3=True).replace("**", ""), group_verdict(members)
            changed = old != new.replace("**", "")
            lines.append(f"- *{group}* ({link}): {old} → {new}" if changed else f"- *{group}* ({link}), parts:")
            for p in moved:
                j = p.judgement
                why = j.no_test or "the interval excludes 0 on the other side"
                note = " (not counted)" if p.excluded else " (exploratory)" if p.exploratory else ""
                lines.append(f"    - {p.task}, {p.setting.name}{note}: {j.interval_verdict} → {j.verdict} ({why})")
    lines += page_changes
    return "\n".join(lines) if lines else "- none"


def claim_id(group: str) -> str:
    """A claim's short name for a one-line summary: its number where it has one ("1a. GRPO lowers ..." ->
    "claim 1a"), else the whole name."""
    head, _, rest = group.partition(". ")
    return f"claim {head}" if rest and head[:1].isdigit() else group


def method_box(parts_by_study: dict[str, list[Part]], summaries: list[MethodSummary], pages: dict[str, Page]) -> str:
    """A method page's evidence box: one line per study that judges the method, each claim by its number and its
    verdict, and the link to the page that has the intervals and the power."""
    lines = []
    for summary in summaries:
        page = pages[summary.study]
        groups = claim_groups([p for p in parts_by_study[summary.study] if summary.select(p.claim)])
        seeds = sorted({p.judgement.num_seeds for members in groups.values() for p in members if p.judgement})
        where = f"[{page.title or summary.study}](../evidence/{Path(page.path).name})"
        if not groups:
            lines.append(f"- {where}: no runs yet (the claims are declared and wait for their runs).")
            continue
        at = f", {' or '.join(map(str, seeds))} seeds" if seeds else ", not judged yet"
        verdicts = " · ".join(f"{claim_id(group)}: {group_verdict(members)}" for group, members in groups.items())
        lines.append(f"- {where}{at}: {verdicts}")
    return "\n".join(lines)
