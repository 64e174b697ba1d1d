"""The POISE method page runs as printed: its configuration block builds the config it describes."""

from pathlib import Path

import pytest
from docs_helpers import docs_env, docs_toy_cache, run_docs_page  # noqa: F401 -- fixtures


@pytest.mark.usefixtures("docs_env")
def test_poise_method_page_config_example(tmp_path):
    namespace = run_docs_page("methods/poise.md", tmp_path)
    args = namespace["args"]
    assert (args.value_baseline, args.num_generations, args.scale_rewards) == ("poise", 2, "none")
    assert (args.poise_layer, args.poise_pool_n, args.poise_prompt_pca, args.poise_response_pca) == (None, 10, 32, 64)
    assert (args.poise_alpha, args.poise_buffer_rows, args.poise_warmup_steps, args.poise_bootstrap_steps) == (
        100.0,
        4096,
        8,
        16,
    )
    assert (args.loss_type, args.epsilon, args.epsilon_high, args.delta) == ("dapo", 0.2, 0.28, 10.0)
    assert Path(args.output_dir).name == "out"
