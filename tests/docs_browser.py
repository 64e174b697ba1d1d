"""Render the built docs site in one headless Chromium and report what a reader would see broken.

A small Chrome DevTools Protocol client over the standard library only (a WebSocket client of RFC 6455 for the one
connection to the browser): one browser process for every page, pages loaded one after another in one tab, and a
JavaScript probe per page that reports the text left untypeset, KaTeX errors, images that did not load, resources that
failed or came from another origin, every link and anchor, and tables wider than their column.

Run by hand to look at pages: ``python tests/docs_browser.py SITE_DIR OUT_DIR PAGE...`` writes ``OUT_DIR/<page>.png``
(full-page screenshots) and prints each page's findings.
"""

import base64
import contextlib
import functools
import html
import http.server
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path


CHROMIUM_INSTALL = "apt-get update && apt-get install -y chromium"
VIEWPORT = (1280, 900)  # a common laptop width: material shows both sidebars from 1220 px on


def find_chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    raise FileNotFoundError(
        f"no Chromium on PATH: the docs render check needs one. Install it with `{CHROMIUM_INSTALL}`"
    )


# --- the site, built and served on a free port of 127.0.0.1 -------------------------------------------------------------------


def build_site(root: Path, site_dir: Path) -> subprocess.CompletedProcess:
    """``mkdocs build --strict`` of the docs of ``root`` into ``site_dir`` (the venv's mkdocs, else the one on PATH)."""
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent)) or shutil.which("mkdocs")
    if mkdocs is None:
        raise FileNotFoundError("mkdocs is not installed: install the package with its 'dev' or 'docs' extra")
    return subprocess.run(
        [mkdocs, "build", "--strict", "--site-dir", str(site_dir)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@contextlib.contextmanager
def serve(site_dir: Path):
    """Serve ``site_dir`` on 127.0.0.1 (a free port) for the duration of the block; yields the base URL."""
    handler = functools.partial(_QuietHandler, directory=str(site_dir))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


# --- a minimal WebSocket client (text frames, client-side masking, fragmentation, ping) ------------------------------


class WebSocket:
    def __init__(self, url: str, timeout: float):
        parts = urllib.parse.urlsplit(url)
        self.sock = socket.create_connection((parts.hostname, parts.port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        request = (
            f"GET {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        self.sock.sendall(request.encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("the browser closed the DevTools connection during the handshake")
            head += chunk
        head, self._buffer = head.split(b"\r\n\r\n", 1)
        if not head.startswith(b"HTTP/1.1 101"):
            raise ConnectionError(f"DevTools WebSocket handshake refused: {head[:200]!r}")

    def _read(self, n: int) -> bytes:
        while len(self._buffer) < n:
            chunk = self.sock.recv(max(65536, n - len(self._buffer)))
            if not chunk:
                raise ConnectionError("the browser closed the DevTools connection")
            self._buffer += chunk
        data, self._buffer = self._buffer[:n], self._buffer[n:]
        return data

    def _send_frame(self, opcode: int, payload: bytes) -> None:
        header = bytes([0x80 | opcode])
        n = len(payload)
        if n < 126:
            header += bytes([0x80 | n])
        elif n < 1 << 16:
            header += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            header += bytes([0x80 | 127]) + struct.pack(">Q", n)
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(header + mask + masked)

    def send(self, text: str) -> None:
        self._send_frame(0x1, text.encode())

    def recv(self) -> str:
        message = b""
        while True:
            first, second = self._read(2)
            opcode, n = first & 0x0F, second & 0x7F
            if n == 126:
                (n,) = struct.unpack(">H", self._read(2))
            elif n == 127:
                (n,) = struct.unpack(">Q", self._read(8))
            mask = self._read(4) if second & 0x80 else None
            payload = self._read(n)
            if mask:
                payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
            if opcode == 0x8:
                raise ConnectionError("the browser closed the DevTools connection")
            if opcode == 0x9:
                self._send_frame(0xA, payload)
                continue
            if opcode in (0x0, 0x1, 0x2):
                message += payload
                if first & 0x80:
                    return message.decode()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


# --- the browser ------------------------------------------------------------------------------------------------------


class Browser:
    """One headless Chromium, driven over its DevTools WebSocket; one tab (a flattened CDP session)."""

    def __init__(self, timeout: float = 30.0, viewport: tuple[int, int] = VIEWPORT):
        self.timeout, self.viewport = timeout, viewport
        self.profile = tempfile.mkdtemp(prefix="docs-chromium-")
        self.proc = subprocess.Popen(
            [
                find_chromium(),
                "--headless=new",
                "--no-sandbox",  # runs as root in CI containers
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-extensions",
                "--disable-background-networking",  # no calls home: they are refused here, many at a time
                "--disable-component-update",
                "--disable-sync",
                "--disable-quic",
                # Every host but the local server fails at once: a request to another site (a CDN, web fonts) is
                # reported, never waited for, whether or not this machine could reach it.
                "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
                f"--user-data-dir={self.profile}",
                f"--window-size={viewport[0]},{viewport[1]}",
                "about:blank",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            self.ws = WebSocket(self._devtools_url(), timeout)
            self._next_id = 0
            self._events = []
            target = self.call("Target.createTarget", url="about:blank")["targetId"]
            self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
            for domain in ("Page", "Runtime", "Network"):
                self.call(f"{domain}.enable", session=True)
            self.call(
                "Emulation.setDeviceMetricsOverride",
                session=True,
                width=viewport[0],
                height=viewport[1],
                deviceScaleFactor=1,
                mobile=False,
            )
        except BaseException:
            self.close()
            raise

    def _devtools_url(self) -> str:
        deadline = time.monotonic() + self.timeout
        seen = []
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                if self.proc.poll() is not None:
                    break
                continue
            seen.append(line)
            match = re.search(r"DevTools listening on (ws://\S+)", line)
            if match:
                # Keep draining stderr so the browser never blocks on a full pipe.
                threading.Thread(target=self.proc.stderr.read, daemon=True).start()
                return match.group(1)
        raise RuntimeError(
            f"Chromium did not open its DevTools port within {self.timeout:.0f} s: {''.join(seen)[-3000:]}"
        )

    def call(self, method: str, session: bool = False, **params):
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = self.session
        self.ws.send(json.dumps(message))
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            reply = json.loads(self.ws.recv())
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method} failed: {reply['error']}")
                return reply.get("result", {})
            if "method" in reply:
                self._events.append(reply)
        raise TimeoutError(f"{method}: no answer within {self.timeout:.0f} s")

    def _wait_event(self, method: str) -> None:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if any(event["method"] == method for event in self._events):
                return
            self._events.append(json.loads(self.ws.recv()))
        raise TimeoutError(f"no {method} within {self.timeout:.0f} s")

    def open(self, url: str) -> None:
        self._events.clear()
        self.call("Page.navigate", session=True, url=url)
        self._wait_event("Page.loadEventFired")

    def requests(self) -> list[dict]:
        """Every request the page made since it was opened: url, HTTP status (None if none came), error."""
        seen = {}
        for event in self._events:
            params = event.get("params", {})
            if event["method"] == "Network.requestWillBeSent":
                seen[params["requestId"]] = {"url": params["request"]["url"], "status": None, "error": None}
            elif event["method"] == "Network.responseReceived" and params["requestId"] in seen:
                seen[params["requestId"]]["status"] = params["response"]["status"]
            elif event["method"] == "Network.loadingFailed" and params["requestId"] in seen:
                seen[params["requestId"]]["error"] = params["errorText"]
        return list(seen.values())

    def evaluate(self, expression: str):
        result = self.call(
            "Runtime.evaluate", session=True, expression=expression, awaitPromise=True, returnByValue=True
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"page script failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, path: Path) -> None:
        size = self.call("Page.getLayoutMetrics", session=True)["cssContentSize"]
        clip = {"x": 0, "y": 0, "width": self.viewport[0], "height": min(size["height"], 16000), "scale": 1}
        shot = self.call("Page.captureScreenshot", session=True, format="png", captureBeyondViewport=True, clip=clip)
        path.write_bytes(base64.b64decode(shot["data"]))

    def close(self) -> None:
        if getattr(self, "ws", None) is not None:
            self.ws.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        shutil.rmtree(self.profile, ignore_errors=True)


# --- what a page shows --------------------------------------------------------------------------------------------------

# Runs in the page after its load event. Waits (bounded) for KaTeX to typeset every arithmatex element and for every
# image to settle, then reports. Text inside code, pre and KaTeX's own output is not prose and is left out.
PROBE = r"""
(async () => {
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  const untypeset = () => [...document.querySelectorAll('.arithmatex')].filter((el) => !el.querySelector('.katex'));
  // KaTeX's scripts load before the load event: if it is not there now, it will not come. Typesetting runs at once
  // when the page is ready; wait for it (5 s at most) while it makes progress, and no longer than 0.3 s without.
  let left = untypeset().length;
  for (let i = 0, idle = 0; i < 100 && idle < 6 && left && typeof katex !== 'undefined'; i++) {
    await sleep(50);
    const now = untypeset().length;
    idle = now < left ? 0 : idle + 1;
    left = now;
  }
  await Promise.all([...document.images].map((img) => img.complete ? null : Promise.race([
    new Promise((r) => { img.addEventListener('load', r); img.addEventListener('error', r); }), sleep(5000)])));
  await document.fonts.ready;
  const article = document.querySelector('article.md-content__inner') || document.body;
  const walker = document.createTreeWalker(article, NodeFilter.SHOW_TEXT, {acceptNode: (node) =>
    node.parentElement.closest('pre, code, script, style, .katex, .katex-display')
      ? NodeFilter.FILTER_REJECT : NodeFilter.FILTER_ACCEPT});
  const prose = [];
  while (walker.nextNode()) prose.push(walker.currentNode.nodeValue);
  const box = (el) => el.getBoundingClientRect();
  const content = box(article);
  return {
    url: location.href,
    prose: prose.join(''),
    typeset: document.querySelectorAll('.arithmatex .katex').length,
    untypeset: untypeset().map((el) => el.textContent.slice(0, 120)),
    katexErrors: [...document.querySelectorAll('.katex-error')].map((el) => el.textContent.slice(0, 120)),
    katexLoaded: typeof katex !== 'undefined',
    ids: [...document.querySelectorAll('[id]')].map((el) => el.id),
    links: [...document.querySelectorAll('a[href]')].map((a) => a.href),
    images: [...article.querySelectorAll('img')].map((img) => ({
      src: img.currentSrc || img.src, ok: img.complete && img.naturalWidth > 0,
      width: Math.round(box(img).width), naturalWidth: img.naturalWidth,
      link: img.closest('a') ? img.closest('a').href : null})),
    contentWidth: Math.round(content.width),
    tables: [...document.querySelectorAll('.md-typeset__scrollwrap')].map((wrap) => ({
      head: [...wrap.querySelectorAll('th')].map((th) => th.textContent.trim()).join(' | ').slice(0, 120),
      overflow: wrap.scrollWidth - wrap.clientWidth})),
  };
})()
"""

# Requests to other sites that are allowed: Material's repository facts (stars, forks, latest release) next to the
# repo_url link, fetched from GitHub's API when a reader's browser can reach it and left out when it cannot. Page
# content, scripts, stylesheets, fonts and images must all come from the site itself.
ALLOWED_EXTERNAL = ("https://api.github.com/repos/",)

# Delimiters of math that was not typeset: arithmatex's output \( \[ and what authors type, $$ and $...$ .
RAW_MATH = re.compile(r"\\\(|\\\[|\$\$|\$[^\s$][^$\n]*\$")


def page_urls(site_dir: Path, base: str) -> list[str]:
    """The URL of every page of the built site (every index.html; 404.html is not a page)."""
    pages = sorted(p.relative_to(site_dir).parent.as_posix() for p in site_dir.rglob("index.html"))
    return [base + ("" if p == "." else p + "/") for p in pages]


def render_site(
    site_dir: Path,
    screenshots: dict[str, Path] | None = None,
    timeout: float = 30.0,
    budget: float = 300.0,
    viewport: tuple[int, int] = VIEWPORT,
    only: str = "/",
) -> dict[str, dict]:
    """Load every page of ``site_dir`` in one headless Chromium; returns the probe's report per page (path from /).

    ``timeout`` bounds each browser call, ``budget`` the whole run (TimeoutError past it); ``only`` keeps the pages
    whose path starts with it.
    """
    reports = {}
    deadline = time.monotonic() + budget
    with serve(site_dir) as base:
        browser = Browser(timeout=timeout, viewport=viewport)
        try:
            for url in page_urls(site_dir, base):
                if not ("/" + url.removeprefix(base)).startswith(only):
                    continue
                if time.monotonic() > deadline:
                    raise TimeoutError(f"rendering the site took over {budget:.0f} s ({len(reports)} pages done)")
                browser.open(url)
                report = browser.evaluate(PROBE)
                report["requests"] = browser.requests()
                path = "/" + url.removeprefix(base)
                reports[path] = report
                if screenshots and path in screenshots:
                    browser.screenshot(screenshots[path])
        finally:
            browser.close()
    for report in reports.values():
        report["path"] = urllib.parse.urlsplit(report["url"]).path
        report["origin"] = urllib.parse.urlsplit(report["url"]).netloc
    return reports


def problems(site_dir: Path, reports: dict[str, dict]) -> dict[str, list[str]]:
    """What is wrong on each page: every finding is a sentence naming the page and the thing."""
    ids = {path: set(report["ids"]) for path, report in reports.items()}
    found = {}
    for path, report in reports.items():
        out = []
        if not report["katexLoaded"]:
            out.append("KaTeX is not loaded (assets/katex/katex.min.js missing from the page or failed)")
        out += [f"math not typeset: {text!r}" for text in report["untypeset"]]
        out += [f"KaTeX could not typeset: {text!r}" for text in report["katexErrors"]]
        for match in RAW_MATH.finditer(report["prose"]):
            context = report["prose"][max(0, match.start() - 40) : match.end() + 40]
            out.append(f"raw math delimiters left in the text: {match.group()!r} in {context!r}")
        for request in report["requests"]:
            where = urllib.parse.urlsplit(request["url"])
            if where.scheme not in ("http", "https") or request["url"].startswith(ALLOWED_EXTERNAL):
                continue
            if where.netloc != report["origin"]:
                out.append(f"loads a resource from another site (the docs must be self-contained): {request['url']}")
            elif request["status"] and request["status"] >= 400:
                out.append(f"resource failed with HTTP {request['status']}: {request['url']}")
            elif request["error"] and request["error"] != "net::ERR_ABORTED":
                out.append(f"resource failed ({request['error']}): {request['url']}")
        for image in report["images"]:
            if not image["ok"]:
                out.append(f"image did not load: {image['src']}")
            elif image["link"] != image["src"]:
                out.append(f"image does not open full size on click (no link to itself): {image['src']}")
            elif image["naturalWidth"] >= report["contentWidth"] and image["width"] < report["contentWidth"] - 2:
                out.append(
                    f"figure narrower than the content column ({image['width']} of {report['contentWidth']} px) "
                    f"although it has {image['naturalWidth']} px: {image['src']}"
                )
        for href in sorted(set(report["links"])):
            out += _link_problem(site_dir, ids, report["origin"], href)
        out += [
            f"table overflows its column by {t['overflow']} px (columns: {t['head']})"
            for t in report["tables"]
            if t["overflow"] > 1
        ]
        if out:
            found[path] = out
    return found


def _link_problem(site_dir: Path, ids: dict[str, set], origin: str, href: str) -> list[str]:
    link = urllib.parse.urlsplit(href)
    if link.scheme not in ("http", "https") or link.netloc != origin:
        return []  # external links are not checked: no machine that runs this reaches them
    target = urllib.parse.unquote(link.path)
    file = site_dir / target.lstrip("/")
    if target.endswith("/"):
        file = file / "index.html"
    if not file.is_file():
        return [f"broken link: {href} ({file.relative_to(site_dir)} is not in the site)"]
    if link.fragment and target.endswith("/"):
        fragment = urllib.parse.unquote(link.fragment)
        # A page not rendered in this run (a run of some pages only): its ids as built, without those scripts add.
        found = fragment in ids[target] if target in ids else f' id="{html.escape(fragment)}"' in file.read_text()
        if not found:
            return [f"broken anchor: {href} (no element with id {link.fragment!r} on {target})"]
    return []


def main(argv: list[str]) -> int:
    viewport = tuple(int(v) for v in os.environ.get("DOCS_VIEWPORT", "1280x900").split("x"))
    site_dir, out_dir, pages = Path(argv[0]), Path(argv[1]), argv[2:]
    out_dir.mkdir(parents=True, exist_ok=True)
    shots = {page: out_dir / (page.strip("/").replace("/", "_") or "index") for page in pages}
    shots = {page: path.with_suffix(".png") for page, path in shots.items()}
    start = time.monotonic()
    reports = render_site(site_dir, shots, viewport=viewport)
    print(f"rendered {len(reports)} pages in {time.monotonic() - start:.1f} s")
    for page, report in reports.items():
        if page in shots:
            print(page, json.dumps({k: report[k] for k in ("contentWidth", "tables", "images")}, indent=1))
    for page, issues in problems(site_dir, reports).items():
        print(page)
        for issue in issues:
            print("   ", issue)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
