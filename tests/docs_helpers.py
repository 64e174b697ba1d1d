"""Run the code blocks of a Markdown page (a docs page, the README) as printed, in page order, in one directory.

* ```` ```python ```` blocks run in one shared namespace (as one script would), with the working directory set;
* ```` ```bash ```` blocks run with ``bash -e`` in the same directory, with this interpreter's ``bin`` first on
  ``PATH`` (so ``python``, ``trl-rlvr-ext`` and ``accelerate`` are this environment's) and this checkout first on
  ``PYTHONPATH`` (so the console scripts run this checkout's code);
* ```` ```text ```` blocks are printed output or formats, not code: never run.

The text of a block is never changed. A test may set environment variables (``TRL_RLVR_EXT_TOY_SIZE=smoke`` shrinks
the toy's defaults, ``TRL_RLVR_EXT_CACHE`` moves the base-model cache); nothing else.

A block that cannot run offline on a CPU in an empty directory carries a machine-readable mark on the line right above
its fence, and the page must say the same in words a reader sees (an admonition right above the mark):

* ``<!-- docs-test: skip (why) -->``: not run (it needs a GPU, the Hugging Face Hub, ...);
* ``<!-- docs-test: clone -->``: it reads ``recipes/`` and runs from the root of a clone of the repository. The harness
  links ``recipes`` into the directory for that block only, so an unmarked block cannot depend on it;
* ``<!-- docs-test: gpu -->``: a python block that only *builds* a training config written for a GPU (TRL's configs
  default to bf16). On a machine without CUDA the harness runs it as printed with transformers' "bf16 on a GPU?"
  probe answering yes, so the config's fields and checks are still exercised; a block that would train on the GPU
  is marked ``skip`` instead.
"""

import contextlib
import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
RECIPES = ROOT / "trl_rlvr_ext" / "recipes"

RUN_LANGUAGES = ("python", "bash")
OUTPUT_LANGUAGES = ("text",)  # printed output or formats: not code
_FENCE = re.compile(r"^```([\w+-]*)[^\n]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)
_MARK = re.compile(r"<!--\s*docs-test:\s*(skip|clone|gpu)\s*(?:\((.*?)\))?\s*-->\s*\Z")


@dataclasses.dataclass(frozen=True)
class CodeBlock:
    """One fenced block of a page. ``mark`` is ``None``, ``"skip"``, ``"clone"`` or ``"gpu"``; ``reason``: the mark's
    text in parentheses."""

    path: Path
    number: int  # 1-based, counting every fenced block of the page
    line: int  # 1-based line of the opening fence
    language: str
    code: str
    mark: str | None
    reason: str | None
    preceding_text: str  # the page above the fence (for the visible-words check)

    @property
    def where(self) -> str:
        return f"{self.path.name}:{self.line} (block {self.number}, {self.language})"


def code_blocks(path) -> list[CodeBlock]:
    """Every top-level fenced block of the Markdown file ``path``, in order."""
    path = Path(path)
    text = path.read_text()
    blocks = []
    for number, match in enumerate(_FENCE.finditer(text), start=1):
        before = text[: match.start()]
        # the mark sits on the line(s) right above the fence, blank lines allowed
        mark = _MARK.search(before)
        language = match.group(1).lower()
        if language not in RUN_LANGUAGES + OUTPUT_LANGUAGES:
            raise ValueError(
                f"{path.name}:{before.count(chr(10)) + 1}: a ```{language or '(no language)'} block: use one of "
                f"{RUN_LANGUAGES} for code or {OUTPUT_LANGUAGES} for output, so the doc tests know what to run"
            )
        blocks.append(
            CodeBlock(
                path=path,
                number=number,
                line=before.count("\n") + 1,
                language=language,
                code=match.group(2),
                mark=mark.group(1) if mark else None,
                reason=mark.group(2) if mark else None,
                preceding_text=before[: mark.start()] if mark else before,
            )
        )
    return blocks


def python_blocks(page: str) -> list[str]:
    """The code of a docs page's python blocks (``page`` relative to ``docs/``)."""
    return [block.code for block in code_blocks(DOCS / page) if block.language == "python"]


def bash_environment() -> dict[str, str]:
    """The environment of a bash block: this interpreter's bin first on PATH, this checkout first on PYTHONPATH."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join(p for p in [str(ROOT), env.get("PYTHONPATH", "")] if p)
    return env


@contextlib.contextmanager
def _working_directory(path: Path):
    cwd = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(cwd)


@contextlib.contextmanager
def _clone_layout(workdir: Path, block: CodeBlock):
    """For a ``clone`` block: ``recipes`` in the directory, as at the root of a clone; removed afterwards."""
    if block.mark != "clone":
        yield
        return
    link = workdir / "recipes"
    if link.exists() or link.is_symlink():
        raise RuntimeError(f"{block.where}: {link} already exists; a docs block must not create 'recipes'")
    link.symlink_to(RECIPES, target_is_directory=True)
    try:
        yield
    finally:
        link.unlink()


@contextlib.contextmanager
def _gpu_config_probe(block: CodeBlock):
    """For a ``gpu`` block on a machine without CUDA: transformers' bf16-on-GPU probe answers yes while it runs."""
    import torch

    if block.mark != "gpu" or torch.cuda.is_available():
        yield
        return
    if block.language != "python":
        raise ValueError(f"{block.where}: the 'gpu' mark is for python blocks that build a config; use 'skip'")
    from transformers import training_args

    probe = training_args.is_torch_bf16_gpu_available
    training_args.is_torch_bf16_gpu_available = lambda *args, **kwargs: True
    try:
        yield
    finally:
        training_args.is_torch_bf16_gpu_available = probe


def run_block(block: CodeBlock, workdir, namespace: dict, timeout: float = 600) -> str | None:
    """Run one block as printed in ``workdir`` (python: in ``namespace``; bash: ``bash -e``). Returns a bash block's
    stdout (a python block prints to this process's stdout)."""
    workdir = Path(workdir)
    with _clone_layout(workdir, block), _gpu_config_probe(block):
        if block.language == "python":
            # pad with blank lines so that tracebacks point at the page's own line numbers
            code = compile("\n" * block.line + block.code, str(block.path), "exec")
            with _working_directory(workdir):
                exec(code, namespace)  # noqa: S102 -- running the docs is the test
        else:
            proc = subprocess.run(
                ["bash", "-e", "-c", block.code],
                cwd=workdir,
                env=bash_environment(),
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
            if proc.returncode != 0:
                raise AssertionError(
                    f"{block.where} exited with status {proc.returncode}:\n{block.code}\n"
                    f"--- stdout (tail)\n{proc.stdout[-3000:]}\n--- stderr (tail)\n{proc.stderr[-6000:]}"
                )
            return proc.stdout
    return None


def run_markdown(path, workdir, until: int | None = None) -> dict:
    """Run the runnable blocks of the Markdown file ``path`` in page order in ``workdir``; returns the python namespace.

    Blocks marked ``skip`` are left out. ``until``: stop after the block with that number (1-based, every block
    counts). Works on any Markdown file, e.g. ``run_markdown(ROOT / "README.md", tmp_path)``.
    """
    blocks = code_blocks(path)
    runnable = [b for b in blocks if b.language in RUN_LANGUAGES and b.mark != "skip"]
    assert runnable, f"{path} has no runnable code block"
    namespace = {"__name__": "__main__"}
    for block in runnable:
        if until is not None and block.number > until:
            break
        run_block(block, workdir, namespace)
    return namespace


def run_docs_page(page: str, workdir, substitutions=None, until: int | None = None) -> dict:
    """`run_markdown` for a page under ``docs/`` (``page`` relative to it, e.g. ``"tutorials/is_dpo.md"``)."""
    if substitutions:
        raise TypeError(
            f"run_docs_page({page!r}) no longer substitutes text: the docs run as printed. Make the printed example "
            "cheap (TRL_RLVR_EXT_TOY_SIZE=smoke shrinks the toy's defaults; the docs_env fixture sets it), or mark the "
            "block (<!-- docs-test: gpu --> for a GPU config, <!-- docs-test: skip (why) -->) with a visible note "
            "above it; see tests/docs_helpers.py."
        )
    return run_markdown(DOCS / page, workdir, until=until)


# ---------------------------------------------------------------- fixtures (import them into a test module to use)
@pytest.fixture(scope="session")
def docs_toy_cache(tmp_path_factory):
    """One toy cache for the session, shared by the xdist workers: the smoke base model is built once (a concurrent
    build is safe: the warm start renames a finished build into place)."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    path = root / "docs_toy_cache"
    path.mkdir(exist_ok=True)
    # Build the shared models up front, one worker at a time: `toy:tiny` is written in place (no atomic rename), so two
    # workers building it at once could let one read a half-written model.
    from filelock import FileLock

    with FileLock(str(root / "docs_toy_cache.lock")), pytest.MonkeyPatch.context() as patch:
        patch.setenv("TRL_RLVR_EXT_TOY_SIZE", "smoke")
        patch.setenv("TRL_RLVR_EXT_CACHE", str(path))
        try:  # where the toy names resolve for the scripts and CLIs
            from trl_rlvr_ext.data import resolve_model_name_or_path
        except ImportError:
            from trl_rlvr_ext.scripts.utils import resolve_model_name_or_path

        for name in ("toy:base", "toy:tiny"):
            resolve_model_name_or_path(name)
    return path


@pytest.fixture
def docs_env(monkeypatch, docs_toy_cache):
    """The only things a docs test changes: environment variables. The toy's smoke sizes, its cache in the session
    directory, offline, one thread per process (bash blocks start their own processes)."""
    monkeypatch.setenv("TRL_RLVR_EXT_TOY_SIZE", "smoke")
    monkeypatch.setenv("TRL_RLVR_EXT_CACHE", str(docs_toy_cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")
    monkeypatch.setenv("WANDB_DISABLED", "true")
    monkeypatch.setenv("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS") or "1")
    return docs_toy_cache
