"""Write a study's records where a page renderer reads them, for tests that render a block from synthetic records."""

import json
from pathlib import Path


def write_records(root: Path, relative: str, records: list[dict]) -> Path:
    """Write `records` as JSON lines at `root / relative` (the committed records' path under a test's own root)."""
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return path
