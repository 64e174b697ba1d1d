"""The TRL matrix from `make test`: the guard subset against TRL 1.14.2 and 1.15.0, each in a light venv.

The main environment runs everything on TRL 1.16; tests/trl_matrix/run.sh says what runs on the other releases and
how the venvs are built. One test per version, so that pytest-xdist runs them side by side.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest


RUN = Path(__file__).parent / "trl_matrix" / "run.sh"


@pytest.mark.slow
@pytest.mark.parametrize("version", ["1.14.2", "1.15.0"])
def test_trl_matrix(version, tmp_path_factory):
    matrix_dir = os.environ.get("TRL_MATRIX_DIR") or str(tmp_path_factory.getbasetemp().parent / "trl-matrix")
    env = {**os.environ, "PYTHON": sys.executable, "TRL_MATRIX_DIR": matrix_dir}
    env.pop("PYTHONPATH", None)  # run.sh sets its own; the main environment's must not shadow the venv's TRL
    proc = subprocess.run(
        ["bash", str(RUN), version], env=env, capture_output=True, text=True, timeout=900, check=False
    )
    output = f"{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}"
    if proc.returncode == 3:
        pytest.skip(f"TRL {version} cannot be downloaded (no package index reachable): {proc.stderr.strip()[-300:]}")
    assert proc.returncode == 0, f"TRL matrix failed on TRL {version}:\n{output}"
    assert f"=== TRL {version}: passed" in proc.stdout
