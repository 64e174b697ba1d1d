"""The IS-DPO docs run: the tutorial end to end (offline, shrunk), and the method page's configuration example."""

import math

from docs_helpers import python_blocks, run_docs_page


def test_tutorial_runs_end_to_end(tmp_path):
    namespace = run_docs_page(
        "tutorials/is_dpo.md",
        tmp_path,
        substitutions={
            "num_examples=256": "num_examples=48",
            "max_steps=30": "max_steps=3",
            "logging_steps=5": "logging_steps=1",
        },
    )
    assert len(python_blocks("tutorials/is_dpo.md")) == 4
    logs = namespace["trainer"].state.log_history
    assert "train_loss" in logs[-1]
    assert {"is/weight_mean", "is/weight_max", "is/clipped_frac", "is/ess"} <= set(logs[0])
    # Section 4 trained on behaviour columns: the weights differ from 1 from the very first step
    assert namespace["first"]["is/weight_mean"] != 1.0
    assert {"behavior_chosen_logps", "behavior_rejected_logps"} <= set(namespace["scored"].column_names)
    assert (tmp_path / "tiny_model" / "config.json").exists()


def test_method_page_config_example_runs(tmp_path):
    # The example targets a GPU machine; on this CPU-only one the config needs use_cpu
    namespace = run_docs_page(
        "methods/is_dpo.md", tmp_path, substitutions={'output_dir="outputs/is_dpo",': 'output_dir="x", use_cpu=True,'}
    )
    args = namespace["args"]
    assert args.importance_sampling and args.is_weight_max == math.exp(0.5) and args.beta == 0.05
