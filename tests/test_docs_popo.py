"""The POPO method page runs as printed: its configuration block builds the config it describes."""

from pathlib import Path

import pytest
from docs_helpers import docs_env, docs_toy_cache, run_docs_page  # noqa: F401 -- fixtures

from trl_rlvr_ext.losses import POPO_PAPER_SETTINGS


@pytest.mark.usefixtures("docs_env")
def test_popo_method_page_config_example(tmp_path):
    namespace = run_docs_page("methods/popo.md", tmp_path)
    args = namespace["args"]
    assert args.objective == "popo" and args.num_generations == 8
    printed = (args.popo_alpha, args.popo_beta_entropy, args.popo_tau, args.popo_feature_noise_std)
    assert printed == (0.1, 0.01, 0.995, 0.02)
    assert args.popo_predictor_hidden_dim == POPO_PAPER_SETTINGS["predictor_hidden_dim"] == 1024
    assert (args.beta, args.entropy_coef) == (0.0, 0.0) and Path(args.output_dir).name == "out"
