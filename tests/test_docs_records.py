"""Numbers on tutorial pages are the records of a run: each table or output between ``<!-- records: FILE [PART] -->``
and ``<!-- /records -->`` must be exactly what FILE (kept beside the page, with the command that made it named on the
page) renders to. Files written by ``tests/record_docs.py`` (a page's blocks, or one command, run and timed) render
with `render_run_records`; the README is checked too."""

import json
import re
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
_BLOCK = re.compile(
    r"<!-- records: (?P<file>\S+)(?: (?P<part>[^>]*?))? -->\n(?P<table>.*?)\n<!-- /records -->", re.DOTALL
)


def render_pass_at_k_table(records: dict) -> str:
    """Pass@k per temperature, as fractions to 3 decimals, one row per recorded result."""
    results = records["results"]
    ks = [int(key.split("@")[1]) for key in results[0]["pass_at_k"]]
    rows = ["| k | " + " | ".join(map(str, ks)) + " |", "|---|" + "---|" * len(ks)]
    for result in results:
        values = " | ".join(f"{result['pass_at_k'][f'pass@{k}']:.3f}" for k in ks)
        rows.append(f"| T = {result['config']['temperature']} | {values} |")
    return "\n".join(rows)


def _seconds(value: float) -> str:
    return f"{value:.0f} s" if value < 120 else f"{value / 60:.1f} min"


def render_run_records(records: dict, part: str) -> str:
    """A part of a `tests/record_docs.py` record:

    * ``times``: a table of every block's wall and CPU time, with the load average it ran under;
    * ``output N`` / ``output N last K``: what the N-th block run printed (its last K lines), as a text block;
    * ``time N``: the N-th block's wall time on one line (with its CPU time), for prose.

    Blocks are numbered among those run: a page's python and bash blocks not marked ``skip``, or the commands.
    """
    words = part.split()
    blocks = {block["number"]: block for block in records["blocks"]}
    if words == ["times"]:
        rows = ["| block | wall time | CPU time | load average (1 min) |", "|---|---|---|---|"]
        for block in records["blocks"]:
            load = " → ".join(f"{x:.1f}" for x in block["load_average_1min"])
            what = f"{block['section']} ({block['language']})" if block.get("section") else f"`{block['first_line']}`"
            rows.append(f"| {what} | {_seconds(block['wall_s'])} | {_seconds(block['cpu_s'])} | {load} |")
        rows.append(f"| all | {_seconds(records['total_wall_s'])} | {_seconds(records['total_cpu_s'])} | |")
        return "\n".join(rows)
    if words[0] == "time" and len(words) == 2:
        block = blocks[int(words[1])]
        return f"{_seconds(block['wall_s'])} wall, {_seconds(block['cpu_s'])} CPU"
    if words[0] == "output" and len(words) in (2, 4):
        lines = blocks[int(words[1])]["stdout"].strip("\n").splitlines()
        if len(words) == 4:
            assert words[2] == "last", part
            lines = lines[-int(words[3]) :]
        return "```text\n" + "\n".join(lines) + "\n```"
    raise ValueError(f"unknown records part {part!r}: use 'times', 'time N', 'output N' or 'output N last K'")


def render_toy_base_table(records: dict) -> str:
    """The toy base model by number of carries, from the "before" values a recorded ``trl-rlvr-ext demo`` printed
    (its first block); the shares of held-out problems are the task's (tests/test_docs_pages.py checks them)."""
    out = records["blocks"][0]["stdout"]
    greedy = re.search(r"greedy accuracy +([\d.]+) ->", out)[1]
    pass_1 = re.search(r"sampled pass@1 +([\d.]+) ->", out)[1]
    by_carries = dict(re.findall(r"(\d): ([\d.]+)->", re.search(r"pass@1 by number of carries(.*)", out)[1]))
    shares = {"0": "22 %", "1": "41 %", "2": "32 %", "3": "4 %"}
    rows = [
        "| carries | share of held-out problems | designed pass rate 0.4<sup>k</sup> | base model's sampled pass@1 |"
    ]
    rows.append("|---|---|---|---|")
    for carries, share in shares.items():
        rows.append(f"| {carries} | {share} | {0.4 ** int(carries):.2f} | {by_carries[carries]} |")
    rows.append(f"| all | | | **{pass_1}** (greedy: **{greedy}**) |")
    return "\n".join(rows)


def render_demo_runs_table(records: dict) -> str:
    """One row per recorded ``trl-rlvr-ext demo --seed S --clip-recovery C ...`` command: what it printed."""
    rows = [
        "| seed | clip recovery | greedy accuracy | sampled pass@1 | pass@16 | train reward first → last log |",
        "|---|---|---|---|---|---|",
    ]
    for block in records["blocks"]:
        seed, clip = re.search(r"--seed (\d+) --clip-recovery (\w+)", block["first_line"]).groups()
        out = block["stdout"]
        cells = [
            re.search(rf"{label} +([\d.]+ -> [\d.]+)", out)[1].replace("->", "→")
            for label in ("greedy accuracy", "sampled pass@1", "pass@16", r"Train reward \(first -> last log\):")
        ]
        rows.append(f"| {seed} | {clip} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


RENDERERS = {"tutorials/data/pass_at_k.json": render_pass_at_k_table}
# named parts of tests/record_docs.py records that need more than `render_run_records`
RUN_RECORD_PARTS = {"toy base": render_toy_base_table, "demo runs": render_demo_runs_table}


def _render(path: Path, part: str | None) -> str:
    records = json.loads(path.read_text())
    if records.get("recorder") == "tests/record_docs.py":
        if part in RUN_RECORD_PARTS:
            return RUN_RECORD_PARTS[part](records)
        return render_run_records(records, part or "times")
    key = path.relative_to(DOCS).as_posix()
    assert key in RENDERERS, f"no renderer for {key} (add one to RENDERERS)"
    return RENDERERS[key](records)


def fill_records(page: Path) -> None:
    """Rewrite every records block of ``page`` with what its file renders (after a new recorded run):
    ``python -c "import sys; sys.path.insert(0, 'tests'); import test_docs_records as t; t.fill_records(t.ROOT / 'README.md')"``."""
    page = Path(page)

    def fill(block):
        rendered = _render((page.parent / block["file"]).resolve(), block["part"])
        return block[0].replace(f"\n{block['table']}\n<!-- /records -->", f"\n{rendered}\n<!-- /records -->")

    empty = re.compile(r"<!-- records: (?P<file>\S+)(?: (?P<part>[^>]*?))? -->\n<!-- /records -->")
    text = empty.sub(lambda m: f"{m[0][: -len('<!-- /records -->')]}\n<!-- /records -->", page.read_text())
    page.write_text(_BLOCK.sub(fill, text))


def test_every_records_table_is_what_its_file_renders():
    found = 0
    for page in [*sorted(DOCS.rglob("*.md")), ROOT / "README.md"]:
        for block in _BLOCK.finditer(page.read_text()):
            path = (page.parent / block["file"]).resolve()
            rendered = _render(path, block["part"])
            assert block["table"] == rendered, (
                f"{page}: the block differs from what {block['file']} gives:\n{rendered}"
            )
            found += 1
    assert found >= 1, "no records table found: the test is void"


def test_run_records_name_their_command_and_page():
    """Each run record names the command that made it, and the page it records says that command."""
    for path in DOCS.rglob("data/*.json"):
        records = json.loads(path.read_text())
        if records.get("recorder") != "tests/record_docs.py":
            continue
        assert records["command"].startswith("python tests/record_docs.py ") and records["blocks"], path
        # the file's name as a whole name (real_model_demo.jsonl does not name demo.json)
        named = re.compile(rf"(?<![\w-]){re.escape(path.name)}(?!\w)")
        users = [p for p in [*DOCS.rglob("*.md"), ROOT / "README.md"] if named.search(p.read_text())]
        assert users, f"{path}: no page uses these records"
        for page in users:
            command = records["command"].removeprefix("python ")
            assert command in " ".join(page.read_text().split()), f"{page}: say how {path.name} was made: {command}"


def test_the_pass_at_k_records_are_the_pages_settings():
    """The recorded run used the settings the page's code block prints (64 samples, T 1.0 and 0.5, 200 problems)."""
    records = json.loads((DOCS / "tutorials/data/pass_at_k.json").read_text())["results"]
    assert [r["config"]["temperature"] for r in records] == [1.0, 0.5]
    assert all(r["config"]["num_samples"] == 64 and r["num_problems"] == 200 for r in records)
    page = (DOCS / "tutorials/pass_at_k.md").read_text()
    assert "num_samples=64" in page and "for temperature in (1.0, 0.5):" in page


def test_the_reasoning_gym_records_show_a_run_that_learns():
    """What the tutorial says of its recorded RL run: the reward rises, no logged gradient is zero, held-out pass@1
    rises; and the base is partly right (pass@1 well between 0 and 1)."""
    records = json.loads((DOCS / "tutorials/data/reasoning_gym.json").read_text())

    def number(section):  # the block of that section (numbers shift when a block is added above it)
        (found,) = [b["number"] for b in records["blocks"] if b["section"].startswith(section)]
        return found

    rl = render_run_records(records, f"output {number('Watching the reasoning boundary')}")
    steps = re.findall(r"step +(\d+): reward ([\d.]+), grad_norm ([\d.]+)", rl)
    assert len(steps) == 8 and steps[-1][0] == "80"
    rewards, grad_norms = [float(s[1]) for s in steps], [float(s[2]) for s in steps]
    assert rewards[-1] > rewards[0] + 0.05 and min(grad_norms) > 0
    before, after = (
        float(x)
        for x in re.findall(
            r"held-out pass@1 ([\d.]+)", render_run_records(records, f"output {number('Tiny warm-started')}") + rl
        )
    )
    assert 0.1 < before < 0.9 and after > before
    assert re.search(r"(\d+) RL prompts, none of them", rl)


def test_the_two_demo_records_agree_to_the_digit():
    """toy.md's reproducibility claim: two seed-0 NSR demo runs, each from an empty cache, print the same numbers."""
    first = json.loads((DOCS / "data/demo.json").read_text())
    seeds = json.loads((DOCS / "data/demo_seeds.json").read_text())
    assert first["cache_empty_at_start"] and seeds["cache_empty_at_start"]
    assert seeds["blocks"][0]["first_line"].startswith("trl-rlvr-ext demo --seed 0 --clip-recovery nsr ")

    def numbers(block):  # the held-out and train lines, without paths and times
        return [line for line in block["stdout"].splitlines() if "->" in line]

    assert numbers(first["blocks"][0]) == numbers(seeds["blocks"][0]) and numbers(first["blocks"][0])


def test_a_page_record_records_the_page_as_it_is():
    """A record of a page's blocks (``page`` set) is of the page as it stands: as many run blocks, each with the first
    line the page's block has now. A block changed since (an import path that moved, a command now run from the
    lab) makes the record another page's: record it again (the command it names)."""
    import sys

    sys.path.insert(0, str(ROOT / "tests"))
    from docs_helpers import RUN_LANGUAGES
    from record_docs import code_blocks

    checked = 0
    for path in DOCS.rglob("data/*.json"):
        records = json.loads(path.read_text())
        if not isinstance(records, dict) or records.get("recorder") != "tests/record_docs.py" or not records["page"]:
            continue
        run = [b for b in code_blocks(ROOT / records["page"]) if b.language in RUN_LANGUAGES and b.mark != "skip"]
        recorded = [block["first_line"] for block in records["blocks"]]
        assert recorded == [b.code.strip().splitlines()[0] for b in run], (
            f"{path}: record it again: {records['command']}"
        )
        checked += 1
    assert checked >= 2  # the reasoning-gym tutorial's and the README's
