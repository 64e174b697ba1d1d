"""docs/reference/reliability.md: its python blocks run as printed, and its checkpoint helper finds the newest
complete checkpoint."""

import json
import os

import pytest
from docs_helpers import run_docs_page


def test_reliability_page_runs(tmp_path):
    pytest.importorskip("math_verify")
    namespace = run_docs_page("reference/reliability.md", tmp_path)
    find = namespace["last_complete_checkpoint"]
    run = tmp_path / "run"
    for step, files in ((2, ["trainer_state.json"]), (4, ["model.safetensors"])):  # 4: killed while saving
        (run / f"checkpoint-{step}").mkdir(parents=True)
        for name in files:
            (run / f"checkpoint-{step}" / name).write_text(json.dumps({}))
    namespace["_uses_curation"] = lambda path: False
    assert find(str(run)) == os.path.join(str(run), "checkpoint-2")
    namespace["_uses_curation"] = lambda path: True
    assert find(str(run)) is None  # no checkpoint has curation_state.json
    (run / "checkpoint-2" / "curation_state.json").write_text("{}")
    assert find(str(run)) == os.path.join(str(run), "checkpoint-2")
