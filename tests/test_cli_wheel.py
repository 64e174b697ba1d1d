"""Fresh-install check: build the wheel, install it into a clean virtualenv, and train a packaged recipe from an empty
directory with the installed ``trl-rlvr-ext`` command.

The virtualenv is new and holds only this package, installed from the wheel (``--no-deps``). Its heavy dependencies
(torch, TRL, transformers, ...) are the ones of the interpreter running the tests, reached through a ``.pth`` line:
installing them from an index would need the network and minutes, and says nothing about this package. A ``.pth``
line does not run the ``.pth`` files of the folder it adds, so an editable install of this package there stays
invisible: the test checks that ``trl_rlvr_ext`` is imported from the new virtualenv.
"""

import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parents[1]
_NOT_SOURCES = shutil.ignore_patterns(
    ".git", ".venv", "__pycache__", "*.egg-info", "build", "dist", "site", "outputs", ".*cache", "*.pyc"
)


def _run(command, **kwargs):
    result = subprocess.run(command, check=False, capture_output=True, text=True, timeout=600, **kwargs)
    assert result.returncode == 0, f"{command}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """The wheel, built from a copy of the sources (the checkout stays clean)."""
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "src"
    shutil.copytree(ROOT, source, symlinks=True, ignore=_NOT_SOURCES)
    # --no-build-isolation: build with the installed setuptools, offline
    _run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation", "-w", str(tmp)])
    (built,) = tmp.glob("trl_rlvr_ext-*.whl")
    return built


def test_wheel_contains_the_recipes_and_accelerate_configs(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    recipes = sorted((ROOT / "trl_rlvr_ext" / "recipes").rglob("*.yaml"))
    assert len(recipes) >= 15
    for recipe in recipes:
        assert recipe.relative_to(ROOT).as_posix() in names, recipe
    assert "trl_rlvr_ext/scripts/grpo.py" in names and "trl_rlvr_ext/cli.py" in names
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "trl-rlvr-ext = trl_rlvr_ext.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


# The product, not the lab: the wheel's Python stays under this many lines (issue 45: it was 30,432 with the studies)
WHEEL_PYTHON_LINES = 25_000
# What only the lab holds: the studies' designs, seeds, settings and pages, and their commands
LAB_MARKERS = ("lab/", "trl_rlvr_ext/studies/", "_study/", "scripts/study.py", "scripts/screen_tasks.py")


def test_wheel_holds_the_product_not_the_lab(wheel):
    """No module of `lab` (nor the studies' old home) ships, no study design, and at most `WHEEL_PYTHON_LINES` lines of
    Python in all."""
    archive = zipfile.ZipFile(wheel)
    names = archive.namelist()
    shipped = [n for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))]
    assert all(n.startswith("trl_rlvr_ext/") for n in shipped), sorted({n.split("/")[0] for n in shipped})
    lab = [n for n in shipped if any(marker in n for marker in LAB_MARKERS)]
    assert not lab, f"lab code in the wheel: {lab[:10]}"
    for design_name in ("EXTENSION_SEEDS", "CONFIRM_SEEDS", "CLIP_REGIME", "make_study"):
        holders = [n for n in shipped if n.endswith(".py") and design_name in archive.read(n).decode()]
        assert not holders, f"{design_name} (a study design) is in the wheel: {holders}"
    lines = sum(len(archive.read(n).decode().splitlines()) for n in shipped if n.endswith(".py"))
    assert 10_000 < lines <= WHEEL_PYTHON_LINES, f"the wheel holds {lines} lines of Python"


@pytest.mark.slow
def test_fresh_install_trains_a_packaged_recipe_from_an_empty_directory(wheel, tmp_path):
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False, symlinks=True)
    python = env_dir / "bin" / "python"
    site_packages = Path(
        _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    )
    (site_packages / "_deps_of_the_test_runner.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", str(wheel)])

    workdir = tmp_path / "empty"
    workdir.mkdir()
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(
        HF_HUB_OFFLINE="1",
        TRL_EXPERIMENTAL_SILENCE="1",
        OMP_NUM_THREADS="1",
        TRL_RLVR_EXT_CACHE=str(tmp_path / "cache"),
    )
    where = _run([str(python), "-c", "import trl_rlvr_ext; print(trl_rlvr_ext.__file__)"], env=env, cwd=workdir)
    assert Path(where.stdout.strip()).is_relative_to(env_dir), where.stdout  # the wheel's copy, not the checkout's

    command = str(env_dir / "bin" / "trl-rlvr-ext")
    listing = _run([command, "recipes"], env=env, cwd=workdir).stdout
    assert "toy_nsr" in listing and "cpu" in listing
    # The packaged toy recipe by name. Its model, toy:base, is warm-started on first use (minutes on a CPU, then
    # cached): the test swaps in the tiny random model, built in a second; everything else is the recipe's.
    run = _run(
        [command, "grpo", "--config", "toy_nsr", "--max_steps", "2", "--model_name_or_path", "toy:tiny"],
        env=env,
        cwd=workdir,
    )
    assert "Model saved to outputs/toy_nsr" in run.stdout, run.stdout[-2000:]
    assert (workdir / "outputs" / "toy_nsr" / "model.safetensors").is_file()
    assert "gemm_4bit_forward" not in run.stderr
    assert sorted(p.name for p in workdir.iterdir()) == ["outputs"]  # nothing else was needed or written here
