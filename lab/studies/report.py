"""The evidence pages, rendered from their records (``python -m lab study report <name>``).

A study's records are JSON lines, one per (task, arm, seed) run, as `run_study` writes them into ``result.json``
(``num_correct`` may be a JSON string of the list). Each page of ``docs/evidence/`` has rendered blocks between
markers::

    <!-- rendered: <block id> -->
    ... written by this module ...
    <!-- end rendered -->

and hand-written prose outside them. `render_pages` recomputes every block from the records (a marker's indentation is
kept, so a block can sit inside an admonition): per task and setting the Pass@k table (mean ± sd over seeds, every
arm of the records, the trivial-policy baselines of ``docs/evidence/data/trivial.jsonl`` where that file exists) and
the per-seed rows; per study the claims (`Study.claims`), each judged on every task and setting where both arms ran by
`lab.studies.verdicts.judge` (paired per-problem pass@k, crossed bootstrap and t over seeds and problems with a
fixed seed, so the output is deterministic), and the commands and wall times; the index's verdict tables; and the
evidence box of each method page. A study's page opens with its verdicts at a glance (`glance`: a table and a forest
plot, an SVG written beside the page and checked like it); its per-setting tables may sit on detail pages
(``Page.details``), each block on exactly one of them (`markdown.fill_pages`). This module only assembles: the pages
are declared in each study's package (``<study>/pages.py``, found through `lab.studies.registry`), the tables in
`pages`, the claims in `judging`, the Markdown in `markdown`, the statistics and the rule in `verdicts`, the runs in
`runner`.
"""

from pathlib import Path

from .coverage import coverage_statement
from .glance import forest_path, forest_svg, glance_table
from .judging import (  # noqa: F401  (the page engine's names, re-exported where the report's users read them)
    Part,
    apply_requirements,
    base_reason,
    claims_table,
    judge_parts,
    judged_problems,
    judged_records,
)
from .markdown import BLOCK_IDS, fill, fill_pages, seed_ranges  # noqa: F401
from .pages import (  # noqa: F401
    BOOTSTRAP_SEED,
    KS,
    NUM_RESAMPLES,
    TRIVIAL_PREFIX,
    TRIVIAL_RECORDS,
    MethodSummary,
    Page,
    PageSetting,
    commands_block,
    evaluation_rows,
    load_records,
    page_tasks,
    pass_at_k_table,
    per_problem,
    seeds_table,
    setting_records,
    splits_blocks,
)
from .registry import get_pages, get_study
from .verdict_index import (  # noqa: F401
    design_rule_changes,
    group_verdict,
    index_glance,
    index_table,
    method_box,
    rule_changes,
)


# Every study's page, by study name (`lab.studies.registry`).
PAGES = get_pages()
INDEX = "docs/evidence/index.md"
# The verdict rule, its history and every part's summary: below the index, on a page of its own.
RULE = "docs/evidence/rule.md"
# Every method page that summarises a study's claims.
METHOD_SUMMARIES = tuple(summary for page in PAGES.values() for summary in page.method_summaries)


def render_study(name: str, root: Path) -> tuple[dict[str, str], list[Part]]:
    """The blocks of one study's page (block id -> markdown) and its judged claims."""
    page, study = PAGES[name], get_study(name)
    blocks, parts, by_setting, all_records = {}, [], {}, {}
    for setting in page.settings:
        records = all_records[setting.name] = setting_records(study, setting, root)
        # the commands and wall times of the runs made in this setting (an untrained arm's runs are listed where
        # their sizes match, not again under every setting that shows them)
        by_setting[setting.name] = [
            r for r in records if not r["arm"].startswith(TRIVIAL_PREFIX) and setting.matches(r)
        ]
        for task in page_tasks(study, records):
            rows = [r for r in records if r["task"] == task]
            prefix = f"{name}:{setting.name}:{task}"
            blocks[f"{prefix}:pass_at_k"] = pass_at_k_table(study, page, rows)
            blocks[f"{prefix}:seeds"] = seeds_table(page, rows)
            if page.extra_blocks is not None:
                for suffix, text in page.extra_blocks(page, setting, task, rows).items():
                    blocks[f"{prefix}:{suffix}"] = text
        parts += judge_parts(name, study, setting, records)
    parts = apply_requirements(parts)
    if page.page_blocks is not None:
        for suffix, text in page.page_blocks(page, all_records, root).items():
            blocks[f"{name}:{suffix}"] = text
    blocks[f"{name}:claims"] = claims_table(parts)
    figure = Path(forest_path(page.path)).relative_to(Path(page.path).parent).as_posix()
    blocks[f"{name}:glance"] = glance_table(parts, figure, f"python -m lab study report {name}")
    blocks[f"{name}:commands"] = commands_block(by_setting)
    splits = splits_blocks(by_setting)  # by task ("" for the note of a page without a reasoning-gym task)
    if page.splits_by_task:
        blocks.update({f"{name}:splits" + (f":{task}" if task else ""): text for task, text in splits.items()})
    else:
        blocks[f"{name}:splits"] = "\n\n".join(splits.values())
    return blocks, parts


def render_pages(root: str | Path = ".", names: list[str] | None = None) -> dict[str, str]:
    """Every page the studies ``names`` (default: all) render, as ``{path relative to root: new text}``: their evidence
    pages, the method pages that summarise them and the index (which shows every study, so it is always rendered)."""
    root = Path(root)
    names = list(PAGES) if names is None else names
    unknown = sorted(set(names) - set(PAGES))
    if unknown:
        raise ValueError(f"Unknown studies {unknown}: choose from {sorted(PAGES)}.")
    out, all_parts, index_blocks, page_changes = {}, {}, {}, []
    for name, page in PAGES.items():  # every study's claims: the index needs them all
        blocks, parts = render_study(name, root)
        all_parts[name] = parts
        # the index repeats the SELF page's mechanism verdicts (judged by prediction, not a paired claim)
        index_blocks.update({f"index:{k.split(':', 1)[1]}": v for k, v in blocks.items() if k == f"{name}:mechanisms"})
        # and the verdicts of a page's own blocks that the rule moved (SELF's mechanisms), in its list of changes
        page_changes += [v for k, v in blocks.items() if k == f"{name}:rule_changes" and v != "- none"]
        if name in names:
            out.update(fill_pages({path: (root / path).read_text() for path in (page.path, *page.details)}, blocks))
            out[forest_path(page.path)] = forest_svg(parts, f"{page.title or page.label}: every claim part")
    index_blocks["index:glance"] = index_glance(all_parts, PAGES)
    index_blocks["index:verdicts"] = index_table(all_parts, PAGES)
    index_blocks["index:coverage"] = coverage_statement()  # the interval's coverage, per measured design
    index_blocks["index:rule_changes"] = rule_changes(all_parts, PAGES)
    index_blocks["index:design_rule_changes"] = design_rule_changes(all_parts, PAGES, page_changes)
    out.update(fill_pages({path: (root / path).read_text() for path in (INDEX, RULE)}, index_blocks))
    # a method page may summarise several studies (the toy's and the real model's): its blocks are filled together
    by_path: dict[str, list[MethodSummary]] = {}
    for summary in METHOD_SUMMARIES:
        by_path.setdefault(summary.path, []).append(summary)
    for path, summaries in by_path.items():
        if any(summary.study in names for summary in summaries):
            box = method_box(all_parts, summaries, PAGES)
            out[path] = fill((root / path).read_text(), {"evidence": box}, path)
    return out


def stale_pages(root: str | Path = ".", names: list[str] | None = None, rendered: dict | None = None) -> list[str]:
    """The pages and figures whose committed text differs from what their records render (``rendered``: what
    `render_pages` gave, where the caller has it already)."""
    root = Path(root)
    rendered = render_pages(root, names) if rendered is None else rendered
    return [path for path, text in rendered.items() if _committed(root / path) != text]


def _committed(path: Path) -> str | None:
    """A rendered file's committed text, ``None`` where it is not there yet (a figure before its first render)."""
    return path.read_text() if path.is_file() else None
