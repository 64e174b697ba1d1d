"""The README's Python snippet runs as printed (offline, on a CPU), in a fresh directory."""

import os
import re
from pathlib import Path


README = Path(__file__).resolve().parents[1] / "README.md"
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def test_readme_python_blocks_run_verbatim(tmp_path, monkeypatch):
    blocks = _BLOCK.findall(README.read_text())
    assert blocks, "README.md has no python block"
    monkeypatch.chdir(tmp_path)  # a fresh directory: nothing from the clone is at hand
    namespace = {"__name__": "__readme__"}
    exec(compile("\n".join(blocks), str(README), "exec"), namespace)  # noqa: S102 -- the text as printed is the test
    trainer = namespace["trainer"]
    assert trainer.state.global_step == 2
    assert trainer.args.clip_recovery == "nsr" and trainer.args.use_cpu
    assert os.path.isdir(tmp_path / "tiny-model")
