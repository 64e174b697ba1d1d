"""The NSR docs run: the offline GRPO+NSR tutorial (shrunk) and the method page's configuration example."""

from docs_helpers import run_docs_page


def test_grpo_nsr_tutorial_runs(tmp_path):
    tiny_base = (
        f"get_base_model_path(cache_dir={str(tmp_path / 'cache')!r}, hidden_size=32, num_hidden_layers=1, "
        "intermediate_size=64, num_steps=20, batch_size=32)"
    )
    namespace = run_docs_page(
        "tutorials/grpo_nsr.md",
        tmp_path,
        substitutions={
            "get_base_model_path()": tiny_base,
            "make_task_datasets()": "make_task_datasets(num_train=64, num_test=8)",
            "per_device_train_batch_size=64": "per_device_train_batch_size=16",
            "max_steps=60": "max_steps=2",
            "logging_steps=10": "logging_steps=1",
        },
    )
    logs = namespace["trainer"].state.log_history
    assert "train_loss" in logs[-1]
    assert all("clip_recovery/high_frac" in log for log in logs if "loss" in log)
    assert namespace["args"].clip_recovery == "nsr" and namespace["args"].steps_per_generation == 4
    assert 0.0 <= namespace["after"]["pass@1"] <= 1.0


def test_nsr_method_page_config_example(tmp_path):
    namespace = run_docs_page(
        "methods/nsr.md", tmp_path, substitutions={'output_dir="out",': 'output_dir="out", use_cpu=True,'}
    )
    args = namespace["args"]
    assert args.clip_recovery == "nsr" and (args.epsilon, args.epsilon_high) == (0.2, 0.28)
