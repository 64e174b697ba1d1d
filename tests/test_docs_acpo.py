"""The ACPO method page runs as printed: its configuration block builds the config it describes."""

from pathlib import Path

import pytest
from docs_helpers import docs_env, docs_toy_cache, run_docs_page  # noqa: F401 -- fixtures


@pytest.mark.usefixtures("docs_env")
def test_acpo_method_page_config_example(tmp_path):
    namespace = run_docs_page("methods/acpo.md", tmp_path)
    args = namespace["args"]
    assert args.adaptive_clip == "acpo" and args.adaptive_clip_scope == "global"
    assert (args.adaptive_clip_alpha, args.adaptive_clip_base) == (3.0, 0.2)
    assert (args.adaptive_clip_min, args.adaptive_clip_max, args.adaptive_clip_num_bins) == (0.0, 3.0, 5)
    assert args.loss_type == "grpo" and args.num_iterations == 2 and Path(args.output_dir).name == "out"
