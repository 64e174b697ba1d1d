"""The RELEX method page runs as printed: its configuration block builds the config it describes."""

import pytest
from docs_helpers import docs_env, docs_toy_cache, run_docs_page  # noqa: F401 -- fixtures


@pytest.mark.usefixtures("docs_env")
def test_relex_method_page_config_example(tmp_path):
    args = run_docs_page("methods/relex.md", tmp_path)["args"]
    assert (args.relex_record_steps, args.relex_record_dtype) == (1, "float16")
    assert args.relex_trajectory_dir.endswith("relex_trajectory")
