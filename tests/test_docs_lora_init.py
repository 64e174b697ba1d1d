"""The LoRA-init docs run: the GRPO tutorial end to end (offline, shrunk) and the method page's examples."""

import torch
from docs_helpers import python_blocks, run_docs_page


def test_tutorial_runs_end_to_end(tmp_path):
    namespace = run_docs_page(
        "tutorials/lora_init_grpo.md",
        tmp_path,
        substitutions={
            # the tiny random model instead of the warm-started base (r = 16 needs hidden size 64 here)
            "base_path = get_base_model_path()  # built on first use (a few minutes), then cached": (
                "from trl_rlvr_ext.toy import save_tiny_model\n"
                "base_path = save_tiny_model('tiny_model', hidden_size=64, intermediate_size=128)"
            ),
            "data = make_task_datasets()": "data = make_task_datasets(num_train=64, num_test=50)",
            "max_steps=60": "max_steps=2",
            "logging_steps=10": "logging_steps=1",
        },
    )
    assert len(python_blocks("tutorials/lora_init_grpo.md")) == 5
    trainer = namespace["trainer"]
    assert sorted(trainer.model.peft_config) == ["default", "ref"]
    assert namespace["get_lora_init_info"](trainer.model).method == "rlpo"
    # section 3: the model at init is the base model, adapters on or off
    assert torch.equal(namespace["adapters_on"], namespace["base"])
    assert torch.equal(namespace["adapters_off"], namespace["base"])
    lora_A = namespace["lora_A"]
    torch.testing.assert_close(lora_A @ lora_A.T, torch.eye(16), atol=1e-5, rtol=0)
    # section 4: KL exactly 0 at the first step
    assert trainer.state.log_history[0]["kl"] == 0.0
    # section 5: the reloaded, merged adapter is the trained policy
    with torch.no_grad():
        torch.testing.assert_close(
            namespace["merged"](**namespace["ids"]).logits, namespace["trained"], atol=1e-5, rtol=1e-5
        )
    assert "greedy_accuracy" in namespace["after"]


def test_method_page_examples_run(tmp_path):
    # The example targets a GPU machine; on this CPU-only one the config needs use_cpu
    namespace = run_docs_page(
        "methods/lora_init.md", tmp_path, substitutions={'output_dir="outputs/rlpo",': 'output_dir="x", use_cpu=True,'}
    )
    args, peft_config = namespace["args"], namespace["peft_config"]
    assert args.lora_init == "rlpo" and args.lora_init_kwargs == {"niter": 12} and args.learning_rate == 1e-5
    assert (peft_config.r, peft_config.lora_alpha) == (16, 32)
    assert callable(namespace["get_peft_model_with_init"])
