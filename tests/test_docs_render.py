"""The docs site as a reader sees it: every page rendered in a real headless Chromium.

``mkdocs build --strict`` checks the Markdown; only a browser shows whether the math was typeset (KaTeX, served by
the site itself), whether images load, whether links and anchors land, and whether wide tables fit their column.
One browser process renders all pages (tests/docs_browser.py); the site is served on a free port of 127.0.0.1 for
the duration of the test.
"""

import importlib.util
import os
import time
from pathlib import Path

import pytest
from docs_browser import build_site, find_chromium, problems, render_site


ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow

# One evidence page (wide tables, figures) and one method page (inline and display math), kept as screenshots.
SCREENSHOT_PAGES = ("/evidence/nsr/", "/methods/nsr/")


def _require_chromium():
    try:
        find_chromium()
    except FileNotFoundError as err:
        pytest.fail(str(err))


def _format(found: dict[str, list[str]]) -> str:
    return "\n".join(f"{page}\n" + "\n".join(f"    {issue}" for issue in issues) for page, issues in found.items())


@pytest.fixture(scope="module")
def built_site(tmp_path_factory):
    site = tmp_path_factory.mktemp("docs") / "site"
    try:
        proc = build_site(ROOT, site)
    except FileNotFoundError as err:
        pytest.fail(str(err))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return site


def test_every_page_renders_clean(built_site, tmp_path):
    _require_chromium()
    shots_dir = Path(os.environ.get("DOCS_RENDER_SCREENSHOTS") or tmp_path)
    shots_dir.mkdir(parents=True, exist_ok=True)
    shots = {page: shots_dir / (page.strip("/").replace("/", "_") + ".png") for page in SCREENSHOT_PAGES}
    start = time.monotonic()
    reports = render_site(built_site, shots, budget=150)
    elapsed = time.monotonic() - start

    pages = {"/" + p.relative_to(built_site).parent.as_posix() + "/" for p in built_site.rglob("index.html")}
    assert set(reports) == {page.replace("/./", "/") for page in pages}, "every page of the site was rendered"
    assert len(reports) >= 20
    found = problems(built_site, reports)
    assert not found, f"{len(found)} pages render with problems:\n{_format(found)}"

    # The checks above would pass on a site with no math and no images: make sure both were really there.
    assert reports["/methods/nsr/"]["typeset"] >= 20, reports["/methods/nsr/"]["typeset"]
    assert sum(r["typeset"] for r in reports.values()) >= 200
    evidence_images = [img for page, r in reports.items() if page.startswith("/evidence/") for img in r["images"]]
    assert len(evidence_images) >= 20 and all(img["link"] == img["src"] for img in evidence_images)
    evidence_tables = [t for page, r in reports.items() if page.startswith("/evidence/") for t in r["tables"]]
    assert len(evidence_tables) >= 20
    for path in shots.values():
        assert path.stat().st_size > 50_000, f"{path} looks blank"
    assert elapsed < 150, f"rendering took {elapsed:.0f} s"


def test_evidence_pages_use_a_wide_screen(built_site):
    """On a 1920 px screen the pages with wide tables widen their column (the others keep Material's reading width):
    tables on one line per row, figures at the column's full width."""
    _require_chromium()
    reports = render_site(built_site, budget=60, viewport=(1920, 1080), only="/evidence/")
    reports.update(render_site(built_site, budget=30, viewport=(1920, 1080), only="/methods/nsr/"))
    found = problems(built_site, reports)
    assert not found, _format(found)
    for page in ("/evidence/nsr/", "/evidence/is_dpo/", "/evidence/self/", "/evidence/lora_init/"):
        assert reports[page]["contentWidth"] >= 1200, (page, reports[page]["contentWidth"])
    assert reports["/methods/nsr/"]["contentWidth"] < 900, reports["/methods/nsr/"]["contentWidth"]


BROKEN_PAGE = """<!doctype html><html><head><meta charset="utf-8"></head><body>
<article class="md-content__inner md-typeset" style="width: 600px">
<p>Raw inline math \\(x^2\\) and $$y$$ left untypeset, and <span class="arithmatex">\\(z\\)</span>.</p>
<p><a href="missing/">a page that is not there</a>, <a href="#nowhere">an anchor that is not there</a>,
<a href="#here" id="here">an anchor that is</a>, <a href="https://example.org/">an external link</a>.</p>
<img src="missing.png" alt="missing">
<div class="md-typeset__scrollwrap" style="overflow-x: auto"><table><tr>
<th style="min-width: 2000px">a column wider than the page</th>
</tr></table></div>
</article></body></html>
"""


def test_the_check_catches_what_it_claims(tmp_path):
    """A hand-written broken page: every kind of problem the render check looks for is reported."""
    _require_chromium()
    (tmp_path / "index.html").write_text(BROKEN_PAGE)
    reports = render_site(tmp_path, budget=60)
    issues = "\n".join(problems(tmp_path, reports)["/"])
    for expected in (
        "KaTeX is not loaded",
        "math not typeset: '\\\\(z\\\\)'",
        "raw math delimiters left in the text: '\\\\('",
        "raw math delimiters left in the text: '$$'",
        "broken link: http://127.0.0.1:",
        "broken anchor: ",
        "image did not load: ",
        "table overflows its column",
    ):
        assert expected in issues, f"{expected!r} not reported; got:\n{issues}"
    assert "#here" not in issues and "example.org" not in issues


def _katex_hook():
    spec = importlib.util.spec_from_file_location("docs_hook_katex", ROOT / "docs_hooks" / "katex.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_katex_cache_rejects_a_tarball_that_is_not_the_pinned_one(tmp_path, monkeypatch):
    katex = _katex_hook()
    monkeypatch.setenv("TRL_RLVR_EXT_DOCS_CACHE", str(tmp_path))
    (tmp_path / f"katex-{katex.KATEX_VERSION}.tgz").write_bytes(b"not katex")
    with pytest.raises(RuntimeError, match="is not the KaTeX .* the registry publishes"):
        katex.fetch_katex()
    assert not (tmp_path / f"katex-{katex.KATEX_VERSION}").exists()


def test_katex_without_npm_or_cache_says_how_to_get_it(tmp_path, monkeypatch):
    katex = _katex_hook()
    monkeypatch.setenv("TRL_RLVR_EXT_DOCS_CACHE", str(tmp_path))
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(RuntimeError, match=r"install npm .*katex-0\.19\.1\.tgz"):
        katex.fetch_katex()


def test_missing_chromium_names_the_install_command(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(FileNotFoundError, match="apt-get install -y chromium"):
        find_chromium()
