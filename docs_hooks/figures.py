"""MkDocs hook: every image of a page links to its own file, so a figure too dense for the column opens full size.

The evidence figures are wide strips (up to 2000 x 350 px) that the content column shrinks to a fraction of their
size; a click (styled ``cursor: zoom-in`` in docs/stylesheets/extra.css) opens the PNG at full resolution. Images
that already sit in a link keep it.
"""

import re


_TAGS = re.compile(r"<a\b[^>]*>|</a>|<img\b[^>]*>", re.IGNORECASE)
_SRC = re.compile(r"""\bsrc=(["'])(.*?)\1""", re.IGNORECASE)


def link_images(html: str) -> str:
    out, last, in_link = [], 0, 0
    for match in _TAGS.finditer(html):
        tag = match.group()
        lower = tag[:4].lower()
        if lower.startswith("<a"):
            in_link += 1
        elif lower.startswith("</a"):
            in_link = max(0, in_link - 1)
        elif not in_link and (src := _SRC.search(tag)):
            out.append(html[last : match.start()])
            out.append(
                f'<a class="rlvr-figure" href="{src.group(2)}" title="Open full size" target="_blank" rel="noopener">{tag}</a>'
            )
            last = match.end()
    out.append(html[last:])
    return "".join(out)


def on_page_content(html, page, config, files):
    return link_images(html)
