"""The LoRA-init docs run as printed: the GRPO tutorial end to end (smoke-sized toy) and the method page's examples."""

import pytest
import torch
from docs_helpers import docs_env, docs_toy_cache, python_blocks, run_docs_page  # noqa: F401 -- fixtures


@pytest.mark.slow
@pytest.mark.usefixtures("docs_env")
def test_tutorial_runs_end_to_end(tmp_path):
    namespace = run_docs_page("tutorials/lora_init_grpo.md", tmp_path)
    assert len(python_blocks("tutorials/lora_init_grpo.md")) == 5
    trainer = namespace["trainer"]
    assert trainer.state.global_step == 60  # as printed
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
    # section 6: the recipe through the CLI (RLPO, then RLMO into the same folder)
    assert (tmp_path / "outputs" / "toy_lora_rlpo" / "adapter_model.safetensors").is_file()


@pytest.mark.usefixtures("docs_env")
def test_method_page_examples_run(tmp_path):
    namespace = run_docs_page("methods/lora_init.md", tmp_path)
    args, peft_config = namespace["args"], namespace["peft_config"]
    assert args.lora_init == "rlpo" and args.lora_init_kwargs == {"solver": "full"} and args.learning_rate == 1e-5
    assert (peft_config.r, peft_config.lora_alpha) == (16, 32)
    assert callable(namespace["get_peft_model_with_init"])
