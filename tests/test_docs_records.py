"""Numbers on tutorial pages are the records of a run: each table between ``<!-- records: FILE -->`` and
``<!-- /records -->`` must be exactly what FILE (kept beside the page, with the command that made it named on the page)
renders to."""

import json
import re
from pathlib import Path


DOCS = Path(__file__).resolve().parents[1] / "docs"
_BLOCK = re.compile(r"<!-- records: (?P<file>\S+) -->\n(?P<table>.*?)\n<!-- /records -->", re.DOTALL)


def render_pass_at_k_table(records: dict) -> str:
    """Pass@k per temperature, as fractions to 3 decimals, one row per recorded result."""
    results = records["results"]
    ks = [int(key.split("@")[1]) for key in results[0]["pass_at_k"]]
    rows = ["| k | " + " | ".join(map(str, ks)) + " |", "|---|" + "---|" * len(ks)]
    for result in results:
        values = " | ".join(f"{result['pass_at_k'][f'pass@{k}']:.3f}" for k in ks)
        rows.append(f"| T = {result['config']['temperature']} | {values} |")
    return "\n".join(rows)


RENDERERS = {"tutorials/data/pass_at_k.json": render_pass_at_k_table}


def test_every_records_table_is_what_its_file_renders():
    found = 0
    for page in sorted(DOCS.rglob("*.md")):
        for block in _BLOCK.finditer(page.read_text()):
            path = (page.parent / block["file"]).resolve()
            key = path.relative_to(DOCS).as_posix()
            assert key in RENDERERS, f"{page}: no renderer for {key} (add one to RENDERERS)"
            rendered = RENDERERS[key](json.loads(path.read_text()))
            assert block["table"] == rendered, f"{page}: the table differs from what {key} gives:\n{rendered}"
            found += 1
    assert found >= 1, "no records table found: the test is void"


def test_the_pass_at_k_records_are_the_pages_settings():
    """The recorded run used the settings the page's code block prints (64 samples, T 1.0 and 0.5, 200 problems)."""
    records = json.loads((DOCS / "tutorials/data/pass_at_k.json").read_text())["results"]
    assert [r["config"]["temperature"] for r in records] == [1.0, 0.5]
    assert all(r["config"]["num_samples"] == 64 and r["num_problems"] == 200 for r in records)
    page = (DOCS / "tutorials/pass_at_k.md").read_text()
    assert "num_samples=64" in page and "for temperature in (1.0, 0.5):" in page
