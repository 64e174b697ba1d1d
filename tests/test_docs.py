"""The docs site builds with --strict (broken links, missing pages and bad API references fail)."""

from pathlib import Path

import pytest
from docs_browser import build_site


ROOT = Path(__file__).resolve().parents[1]


def test_mkdocs_builds_strict(tmp_path):
    try:
        proc = build_site(ROOT, tmp_path / "site")
    except FileNotFoundError as err:
        pytest.fail(str(err))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
