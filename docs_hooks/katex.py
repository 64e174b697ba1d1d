"""MkDocs hook: serve KaTeX from the site itself, so the docs' math renders with no CDN.

The pages write math as ``$...$`` / ``$$...$$``; ``pymdownx.arithmatex`` (generic mode) turns it into ``\\(...\\)`` /
``\\[...\\]`` in elements of class ``arithmatex``, and ``docs/javascripts/katex.js`` typesets those with KaTeX in the
browser. KaTeX comes from the npm registry as one pinned tarball (``npm pack``), checked against the sha512 the registry
publishes for that version, kept in a cache outside the repository (nothing of KaTeX is committed), and added to the
build as generated files under ``assets/katex/`` (so ``mkdocs serve`` serves them too).

Why this and not a CDN or a pip package: machines that build the docs reach package registries only; no pip package
ships a maintained KaTeX or MathJax build; one npm tarball of 1.5 MB is the smallest, cacheable unit, and KaTeX renders
synchronously (no layout shift, and a headless browser check knows when typesetting is done).

Cache: ``$TRL_RLVR_EXT_DOCS_CACHE`` or ``~/.cache/trl_rlvr_ext/docs``. Prefetch (e.g. in a Makefile) with
``python docs_hooks/katex.py``.
"""

import base64
import fcntl
import hashlib
import os
import shutil
import subprocess
import tarfile
from pathlib import Path


KATEX_VERSION = "0.19.1"
# `npm view katex@0.19.1 dist.integrity`
KATEX_INTEGRITY = "sha512-jG8uKntjSEcm2EpQOh0XturpPuuC9r3Sq5HLHdsFdWZT27E672SF19QEi+of0/YeOy15lDgRhKvr5614uRrEfA=="
# What the pages need from the tarball's dist/: the library, its stylesheet and fonts, and the auto-render extension.
_MEMBERS = ("katex.min.js", "katex.min.css", "contrib/auto-render.min.js", "fonts/")
SITE_DIR = "assets/katex"


def cache_dir() -> Path:
    return Path(os.environ.get("TRL_RLVR_EXT_DOCS_CACHE") or Path.home() / ".cache" / "trl_rlvr_ext" / "docs")


def _integrity(path: Path) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(path.read_bytes()).digest()).decode()


def fetch_katex() -> Path:
    """The folder holding KaTeX's dist files, fetched from the npm registry the first time."""
    root = cache_dir()
    dist = root / f"katex-{KATEX_VERSION}"
    if (dist / ".complete").exists():
        return dist
    root.mkdir(parents=True, exist_ok=True)
    # Two builds at once (tests run in parallel) must not fetch and unpack into the same folder together.
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (dist / ".complete").exists():
            _fetch(root, dist)
    return dist


def _fetch(root: Path, dist: Path) -> None:
    tarball = root / f"katex-{KATEX_VERSION}.tgz"
    if not tarball.exists():
        npm = shutil.which("npm")
        if npm is None:
            raise RuntimeError(
                f"The docs serve KaTeX {KATEX_VERSION} from the site and it is not cached in {root}: install npm "
                f"(`apt-get install -y npm`) so the build can run `npm pack katex@{KATEX_VERSION}`, or put "
                f"katex-{KATEX_VERSION}.tgz there (or set TRL_RLVR_EXT_DOCS_CACHE to a folder holding it)."
            )
        proc = subprocess.run(
            [npm, "pack", f"katex@{KATEX_VERSION}", "--pack-destination", str(root), "--silent"],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if proc.returncode != 0 or not tarball.exists():
            raise RuntimeError(
                f"`npm pack katex@{KATEX_VERSION}` failed (exit {proc.returncode}); the docs need it for their math. "
                f"npm said: {(proc.stderr or proc.stdout).strip()[-2000:]}"
            )
    found = _integrity(tarball)
    if found != KATEX_INTEGRITY:
        raise RuntimeError(
            f"{tarball} is not the KaTeX {KATEX_VERSION} the registry publishes (integrity {found}, expected "
            f"{KATEX_INTEGRITY}): delete it and build again to fetch it anew."
        )
    staging = root / f".katex-{KATEX_VERSION}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    with tarfile.open(tarball) as tar:
        members = [
            m
            for m in tar.getmembers()
            if m.isfile() and any(m.name.startswith("package/dist/" + want) for want in _MEMBERS)
        ]
        for member in members:
            member.name = member.name.removeprefix("package/dist/")
        tar.extractall(staging, members=members, filter="data")
    (staging / ".complete").write_text(KATEX_VERSION + "\n")
    shutil.rmtree(dist, ignore_errors=True)
    staging.rename(dist)


def on_files(files, config):
    from mkdocs.structure.files import File

    dist = fetch_katex()
    for path in sorted(dist.rglob("*")):
        if path.is_file() and path.name != ".complete":
            uri = f"{SITE_DIR}/{path.relative_to(dist).as_posix()}"
            files.append(File.generated(config, uri, abs_src_path=str(path)))
    return files


if __name__ == "__main__":
    print(fetch_katex())
