"""The DelTA method page runs as printed: its configuration block builds the config it describes."""

from pathlib import Path

import pytest
from docs_helpers import docs_env, docs_toy_cache, run_docs_page  # noqa: F401 -- fixtures


@pytest.mark.usefixtures("docs_env")
def test_delta_method_page_config_example(tmp_path):
    namespace = run_docs_page("methods/delta.md", tmp_path)
    args = namespace["args"]
    assert args.token_credit == "delta"
    assert (args.token_credit_w_lo, args.token_credit_w_hi, args.token_credit_refine_steps) == (0.8, 1.2, 1)
    assert (args.loss_type, args.epsilon, args.epsilon_high, args.delta) == ("dapo", 0.2, 0.28, 10.0)
    assert Path(args.output_dir).name == "out"
