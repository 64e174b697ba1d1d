"""The RSI-S method page runs as printed: its configuration block builds the config it describes."""

from pathlib import Path

import pytest
from docs_helpers import docs_env, docs_toy_cache, run_docs_page  # noqa: F401 -- fixtures


@pytest.mark.usefixtures("docs_env")
def test_rsi_method_page_config_example(tmp_path):
    namespace = run_docs_page("methods/rsi.md", tmp_path)
    args = namespace["args"]
    assert (args.rsi_selection, args.rsi_low, args.rsi_high, args.rsi_eps) == ("interval", 0.25, 3.0, 1e-8)
    assert (args.rsi_quantile_low, args.rsi_quantile_high, args.top_entropy_quantile) == (None, None, 1.0)
    assert args.loss_type == "dapo" and Path(args.output_dir).name == "out"
