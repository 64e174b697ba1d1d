"""Run the ```python blocks of a docs page, in order, as one script (docs examples must actually run)."""

import os
import re
from pathlib import Path


DOCS = Path(__file__).resolve().parents[1] / "docs"
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def python_blocks(page: str) -> list[str]:
    return _BLOCK.findall((DOCS / page).read_text())


def run_docs_page(page: str, workdir, substitutions: dict[str, str] | None = None) -> dict:
    """Execute the page's python blocks in ``workdir``; ``substitutions`` shrink sizes for the test (e.g.
    ``{"max_steps=200": "max_steps=2"}``) and each must match, so the page cannot drift from the test silently."""
    code = "\n".join(python_blocks(page))
    assert code, f"{page} has no python blocks"
    for old, new in (substitutions or {}).items():
        assert old in code, f"{page} no longer contains {old!r}: update the test's substitutions"
        code = code.replace(old, new)
    namespace = {"__name__": "__docs__"}
    cwd = os.getcwd()
    os.chdir(workdir)
    try:
        exec(compile(code, str(DOCS / page), "exec"), namespace)  # noqa: S102 -- running the docs is the test
    finally:
        os.chdir(cwd)
    return namespace
