"""DeepSpeed ZeRO-2, ZeRO-3 and FSDP2 for real: 2 CPU processes (gloo), launched with the package's own configs.

One ``accelerate launch`` per mode runs every case in the same two processes (tests/sharding/harness.py) and writes
a JSON per rank; the tests below only read them. The main launch also runs the cases of `KIT_CASES` the way the
method authors' kit runs a user's (`trl_rlvr_ext.testing.distributed`), and `assert_sharded_equal` checks them through
the harness's launches (`Launches.kit`), so the kit's checks add no launch. Launches are shared by all tests (and all xdist workers: a file
lock makes the first one run it) and start only when a test needs that mode:

    ddp    multi_gpu.yaml          main (cases, then a run killed with SIGKILL in step 3), resume
    zero2  deepspeed_zero2.yaml    main, resume
    zero3  deepspeed_zero3.yaml    main, resume
    fsdp2  fsdp2.yaml              main, resume   (FSDP relabel in the harness: docs/design/CPU_STACK.md section 4)

Every launch passes ``--num_processes 2 --mixed_precision no`` on the command line (the configs say bf16 for GPUs;
the comparisons with DDP are in float32). The first DeepSpeed launch JIT-builds ``deepspeed_shm_comm`` into
``TORCH_EXTENSIONS_DIR`` (default here: ``~/.cache/trl_rlvr_ext/torch_extensions``), 30-150 s once.
"""

import importlib.util
import json
import math
import os
import subprocess
from pathlib import Path

import pytest
import torch

from trl_rlvr_ext.testing import assert_sharded_equal
from trl_rlvr_ext.testing.sharded import (
    CONFIG_OF,
    accelerate_command,
    assert_logs_close,
    needs_deepspeed,
    sharded_case,
    sharding_problems,
)


ROOT = Path(__file__).resolve().parents[1]
HARNESS = ROOT / "tests" / "sharding" / "harness.py"
SHARDED = ("zero3", "fsdp2")  # the modes that shard parameters
ALL_SHARDED = ("zero2", "zero3", "fsdp2")  # ZeRO-2 shards optimizer state and gradients only
LORA_METHODS = ("rlpo", "rlmo", "pissa", "milora")
# The options compared with DDP, case by case (tests/sharding/harness.py)
DDP_CASES = (
    "grpo_none",
    "nsr",
    "nsr_expected",
    "self",
    "pass_rate",
    "dynamic_sampling",
    "acpo",  # + off-policy diagnostics
    "acpo_nsr_delta",  # ACPO (per-rank statistics) + NSR + DelTA
    "eval_callbacks",
    "isdpo",
    "resume_uninterrupted",  # NSR + pass-rate curation + dynamic sampling together, 4 steps
)
# Checked with the method authors' kit (`assert_sharded_equal`), as a user checks their own method: the harness runs
# these cases in its launches too (tests/sharding/harness.py, KIT_CASES), so the kit's checks add no launch
KIT_CASES = {
    "delta": {"token_credit": "delta"},
    "rsi": {"rsi_selection": "quantile", "rsi_quantile_low": 0.2, "rsi_quantile_high": 0.8},  # gathered over ranks
}
KIT_TRAINING = {"num_iterations": 2, "learning_rate": 0.1}
KIT_SPEC = {name: sharded_case(options, training_args=KIT_TRAINING) for name, options in KIT_CASES.items()}
TIMEOUT = 1200

pytestmark = [pytest.mark.distributed, pytest.mark.slow]


def _launch(mode: str, phase: str, model_path: str, out: Path) -> subprocess.CompletedProcess:
    from trl_rlvr_ext.data import resolve_model_name_or_path

    cmd, env = accelerate_command(CONFIG_OF[mode], str(HARNESS), mode, phase, model_path, str(out))
    (out / "kit_cases.json").write_text(json.dumps(KIT_SPEC, sort_keys=True))
    env["TRL_RLVR_EXT_KIT_CASES"] = str(out / "kit_cases.json")
    # the real model's case: fetched and converted here, once, before the two ranks start (cached after the first)
    env["TRL_RLVR_EXT_REAL_MODEL"] = resolve_model_name_or_path("smollm2-135m-instruct")
    with open(out / f"{phase}.log", "w") as log:
        return subprocess.run(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, timeout=TIMEOUT, check=False)


def _tail(path: Path, n: int = 6000) -> str:
    return path.read_text(errors="replace")[-n:] if path.exists() else "(no log)"


class Launches:
    """The launches, run once each (across xdist workers too) when a test first asks for them."""

    def __init__(self, root: Path, model_path: str):
        self.root, self.model_path, self.cache = root, model_path, {}

    def __call__(self, mode: str, phase: str = "main") -> list[dict]:
        key = (mode, phase)
        try:
            needs_deepspeed(mode)
        except RuntimeError as error:
            pytest.skip(str(error))
        if key not in self.cache:
            from filelock import FileLock

            out = self.root / mode
            out.mkdir(parents=True, exist_ok=True)
            with FileLock(str(out) + ".lock"):
                if phase == "resume":
                    self(mode, "main")  # the killed run's checkpoint
                done = out / f"{phase}.done"
                if not done.exists():
                    proc = _launch(mode, phase, self.model_path, out)
                    killed = [out / f"killed_rank{r}" for r in (0, 1)]
                    if phase == "main":  # ends with the kill run: SIGKILL, so a failing exit
                        assert all(k.exists() for k in killed), (
                            f"{mode}: the kill run did not die in step 3 (launch exit code {proc.returncode}; a rank "
                            f"that crashed shows its stack in the log):\n{_tail(out / f'{phase}.log')}"
                        )
                    else:
                        assert proc.returncode == 0, f"{mode} {phase} failed:\n{_tail(out / f'{phase}.log')}"
                    done.write_text(str(proc.returncode))
            ranks = [json.loads((out / f"{phase}_rank{r}.json").read_text()) for r in (0, 1)]
            self.cache[key] = ranks
        return self.cache[key]

    def kit(self, mode: str, cases: dict) -> list[dict]:
        """The kit's launcher (`assert_sharded_equal(launcher=...)`): its case, run by the harness's main launch."""
        ((_, case),) = cases.items()
        names = [name for name, spec in KIT_SPEC.items() if spec == case]
        assert names, f"the harness runs only the kit cases of KIT_CASES; add {case} there"
        self(mode)
        ranks = [json.loads((self.root / mode / f"kit_rank{r}.json").read_text()) for r in (0, 1)]
        return [{"case": ranks[r][names[0]]} for r in (0, 1)]

    def case(self, mode: str, name: str, phase: str = "main") -> list[dict]:
        ranks = self(mode, phase)
        for rank, result in enumerate(ranks):
            assert name in result, f"{mode}: case {name!r} did not run on rank {rank}"
            assert "error" not in result[name], f"{mode} {name} rank {rank}: {result[name].get('traceback')}"
        return [r[name] for r in ranks]


@pytest.fixture(scope="session")
def launches(tiny_model_path, tmp_path_factory, request):
    # One folder for all xdist workers (their base temps share a parent), so each launch runs once
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if hasattr(request.config, "workerinput") else base) / "sharding_launches"
    # Debugging: reuse the launches of an earlier session (a folder holding <mode>/<phase>.done and the JSONs)
    root = Path(os.environ.get("TRL_RLVR_EXT_SHARDING_DIR") or root)
    return Launches(root, tiny_model_path)


# ---------------------------------------------------------------------------------------------- it really sharded
@pytest.mark.parametrize("mode", ["ddp", "zero2", "zero3", "fsdp2"])
def test_the_launch_really_runs_its_mode(launches, mode):
    """The engine each case trained under, on both ranks: no case fell back to something else."""
    for result in launches(mode):
        for name, case in result.items():
            if "refuse" in name or "error" in case:
                continue
            assert case["world_size"] == 2, name
            # DDP wraps in DDP; ZeRO-2/3 a DeepSpeed engine of that stage; ZeRO-3 half of every attention weight on
            # each rank; FSDP2 every parameter a DTensor sharded on dim 0, halved
            assert sharding_problems(mode, case["sharding"]) == [], name


@pytest.mark.parametrize("mode", ["ddp", "zero2", "zero3", "fsdp2"])
def test_every_case_ran_and_ranks_agree(launches, mode):
    ranks = launches(mode)
    names = [n for n in ranks[0] if "refuse" not in n]
    errors = {n: ranks[r][n]["traceback"] for r in (0, 1) for n in names if "error" in ranks[r][n]}
    assert not errors, "\n".join(f"--- {n}\n{tb}" for n, tb in errors.items())
    for name in names:
        left, right = ranks[0][name], ranks[1][name]
        assert left["param_digest"] == right["param_digest"], f"{mode} {name}: parameters differ between ranks"
        assert left["logs"] == right["logs"], f"{mode} {name}: logged metrics differ between ranks"
        for key in ("curation", "stream", "pass_at_k", "boundary", "lora_digest", "poise_probe"):
            assert left.get(key) == right.get(key), f"{mode} {name}: {key} differs between ranks"


# ---------------------------------------------------------------------------------------------- options vs DDP
@pytest.mark.parametrize("mode", ALL_SHARDED)
@pytest.mark.parametrize("case", DDP_CASES)
def test_sharded_step_matches_ddp(launches, mode, case):
    """Loss and every logged metric of each step equal DDP's to 1e-5, option by option."""
    sharded_ranks, ddp_ranks = launches.case(mode, case), launches.case("ddp", case)
    sharded, ddp = sharded_ranks[0], ddp_ranks[0]
    for got, want in zip(sharded_ranks, ddp_ranks):  # NSR: each rank's generator drew exactly what DDP's drew
        assert got.get("generator_digest") == want.get("generator_digest"), f"{mode} vs ddp, {case}: NSR stream"
    assert_logs_close(sharded["logs"], ddp["logs"], 1e-5, f"{mode} vs ddp, {case}")
    assert sharded["param_abs_sum"] == pytest.approx(ddp["param_abs_sum"], rel=1e-6)
    for key in ("curation", "stream", "pass_at_k"):
        assert sharded.get(key) == ddp.get(key), f"{mode} vs ddp, {case}: {key}"
    if "boundary" in ddp:
        for (step, got), (_, want) in zip(sharded["boundary"], ddp["boundary"]):
            assert got == pytest.approx(want, abs=1e-5, nan_ok=True), (step, got, want)


@pytest.mark.parametrize("mode", ALL_SHARDED)
@pytest.mark.parametrize("case", sorted(KIT_CASES))
def test_method_sharded_equals_ddp_with_the_kit(launches, mode, case):
    """DelTA (weights from a hooked no-grad forward of the sharded model) and RSI-S (quantile bounds over every rank's
    RSI values) through `trl_rlvr_ext.testing.assert_sharded_equal`: every logged value equal to DDP's to 1e-5, the
    parameters really sharded, the ranks in agreement; and the cases are not void."""
    records = assert_sharded_equal(
        KIT_CASES[case], backends=(mode,), training_args=KIT_TRAINING, launcher=launches.kit
    )
    logs = records[mode][0]["logs"]
    if case == "delta":
        assert logs[0]["token_credit/weight_std"] > 0.01, f"{mode}: DelTA's weights are all equal"
        assert logs[0]["token_credit/weight_mean"] == pytest.approx(1.0, abs=1e-5)
    else:
        assert all(0 < log["rsi/kept_frac"] < 1 for log in logs), f"{mode}: the quantile bounds dropped nothing"


# The probe's Pearson r and Brier skill are ratios over the spread of a few predictions: they magnify the last-digit
# differences of ZeRO-3's reordered sums (2e-5 seen on the tiny model, where the loss differs by 1.4e-6)
POISE_RATIO_METRICS = ("poise/pearson", "poise/brier_skill")


@pytest.mark.parametrize("mode", ALL_SHARDED)
def test_poise_matches_ddp(launches, mode):
    """POISE vs DDP: every logged metric (the probe's predictions and errors included) to 1e-5, but the probe's two
    ratio metrics (1e-4); the bootstrap then the probe phase in both."""
    got, want = launches.case(mode, "poise")[0], launches.case("ddp", "poise")[0]
    strip = lambda logs: [{k: v for k, v in log.items() if k not in POISE_RATIO_METRICS} for log in logs]  # noqa: E731
    assert_logs_close(strip(got["logs"]), strip(want["logs"]), 1e-5, f"{mode} vs ddp, poise")
    for g, w in zip(got["logs"], want["logs"], strict=True):
        for key in POISE_RATIO_METRICS:
            assert (key in g) == (key in w) and g.get(key, 0) == pytest.approx(w.get(key, 0), abs=1e-4), (mode, key)
    assert [log["poise/phase"] for log in got["logs"]] == [0.0, 1.0, 1.0]


@pytest.mark.parametrize("mode", ["zero2", "zero3", "fsdp2"])
def test_nsr_clip_was_active(launches, mode):
    for case in ("nsr", "nsr_expected"):
        logs = launches.case(mode, case)[0]["logs"]
        assert max(log["clip_ratio/region_mean"] for log in logs) > 0, f"{mode} {case}: clip never active"
        rescued = max(log["clip_recovery/low_frac"] + log["clip_recovery/high_frac"] for log in logs)
        assert rescued > 0, f"{mode} {case}: nothing rescued: the case is void"


@pytest.mark.parametrize("mode", ALL_SHARDED)
def test_acpo_and_delta_acted(launches, mode):
    """The cases are not void: ACPO's bounds moved off the base width and clipped, several bins were filled, the
    diagnostics saw the ratios move, DelTA's weights spread (mean 1), and NSR rescued past ACPO's bounds."""
    acpo = launches.case(mode, "acpo")[0]["logs"]
    assert max(log["adaptive_clip/clip_ratio_low"] + log["adaptive_clip/clip_ratio_high"] for log in acpo) > 0
    assert max(log["adaptive_clip/ratio_std_bin0"] for log in acpo) > 0.1
    assert any(sum(k.startswith("adaptive_clip/bound_bin") for k in log) > 1 for log in acpo), "one bin only"
    assert acpo[-1]["off_policy/ratio_p99"] > 1 > acpo[-1]["off_policy/ratio_p1"]
    assert acpo[-1]["off_policy/update_index"] == 1
    logs = launches.case(mode, "acpo_nsr_delta")[0]["logs"]
    assert logs[0]["token_credit/weight_std"] > 0.01, f"{mode} acpo_nsr_delta: DelTA's weights are all equal"
    assert logs[0]["token_credit/weight_mean"] == pytest.approx(1.0, abs=1e-5)
    combined = launches.case(mode, "acpo_nsr_delta")[0]["logs"]
    assert max(log["clip_recovery/low_frac"] + log["clip_recovery/high_frac"] for log in combined) > 0
    assert max(log["adaptive_clip/clip_ratio_low"] + log["adaptive_clip/clip_ratio_high"] for log in combined) > 0


@pytest.mark.parametrize("mode", ALL_SHARDED)
def test_curation_and_dynamic_sampling_did_something(launches, mode):
    self_logs = launches.case(mode, "self")[0]["logs"]
    assert min(log["curation/kept_prompts"] for log in self_logs) < 4, "SELF never dropped a prompt (4 per step)"
    # a dropped step would run with zero gradients under DeepSpeed but be skipped elsewhere: none here, so the
    # comparison with DDP holds (refusal of the general case: test_refusals)
    assert all(log["curation/step_skipped"] == 0 for log in self_logs)
    assert launches.case(mode, "pass_rate")[0]["curation"]["state"]
    ds = launches.case(mode, "dynamic_sampling")[0]
    assert ds["stream"]["drawn"] > 0 and any(log["dynamic_sampling/kept_frac"] < 1 for log in ds["logs"])


@pytest.mark.parametrize("mode", ALL_SHARDED)
def test_relex_records_the_full_weights(launches, mode):
    """RELEX's trajectory under sharding: full tensors (not a rank's shard), the same as DDP's, and θ_0 plus the last
    delta is the final model (to float16's rounding of the deltas)."""
    ranks = launches.case(mode, "relex")
    got, want = ranks[0]["relex"], launches.case("ddp", "relex")[0]["relex"]
    assert got["steps"] == want["steps"] == [1, 2]
    assert got["shapes"] == want["shapes"]
    assert got["delta_abs_sums"] == pytest.approx(want["delta_abs_sums"], rel=1e-3)
    assert min(got["delta_abs_sums"]) > 0  # the weights moved: the comparison can fail
    assert got["final_abs_sum"] == pytest.approx(ranks[0]["param_abs_sum"], rel=1e-4)


def test_zero3_evaluation_without_gathering_equals_gathered(launches):
    """ds3_gather_for_generation=False: the callbacks generate on the partitioned model (layer-wise gathers, in
    lockstep) and get the numbers of the gathered model."""
    gathered, layerwise = (
        launches.case("zero3", "eval_callbacks")[0],
        launches.case("zero3", "eval_callbacks_no_ds3_gather")[0],
    )
    assert layerwise["pass_at_k"] == gathered["pass_at_k"] and layerwise["pass_at_k"]
    for (_, got), (_, want) in zip(layerwise["boundary"], gathered["boundary"]):
        assert got == pytest.approx(want, abs=1e-5, nan_ok=True)


@pytest.mark.parametrize("mode", ALL_SHARDED)
def test_self_empty_step(launches, mode):
    """A SELF step that keeps no prompt: skipped under FSDP2 as under DDP (same parameters and optimizer state), but
    run with zero gradients under DeepSpeed (Adam's step count moves, so the next updates differ): what the refusal
    of DeepSpeed + SELF without `curation_self_allow_zero_grad_steps` is about."""
    ddp, sharded = launches.case("ddp", "self_skip")[0], launches.case(mode, "self_skip")[0]
    assert ddp["logs"][0]["curation/step_skipped"] == 1 and ddp["logs"][1]["curation/step_skipped"] == 0
    assert [log["curation/step_skipped"] for log in sharded["logs"]] == [
        log["curation/step_skipped"] for log in ddp["logs"]
    ]
    if mode == "fsdp2":
        assert_logs_close(sharded["logs"], ddp["logs"], 1e-5, "fsdp2 vs ddp, self_skip")
        assert sharded["param_abs_sum"] == pytest.approx(ddp["param_abs_sum"], rel=1e-6)
    else:
        assert_logs_close(sharded["logs"][:2], ddp["logs"][:2], 1e-5, f"{mode} vs ddp, self_skip up to the update")
        assert sharded["param_abs_sum"] != pytest.approx(ddp["param_abs_sum"], rel=1e-6)


# ---------------------------------------------------------------------------------------------- stock when off
@pytest.mark.parametrize("mode", ["zero2", "zero3", "fsdp2"])
def test_options_off_equal_stock_trl_to_the_bit(launches, mode):
    ours, stock = launches.case(mode, "grpo_none")[0], launches.case(mode, "grpo_stock")[0]
    assert ours["logs"] == stock["logs"] and ours["param_digest"] == stock["param_digest"]
    ours, stock = launches.case(mode, "isdpo_off")[0], launches.case(mode, "dpo_stock")[0]
    assert ours["logs"] == stock["logs"] and ours["param_digest"] == stock["param_digest"]


# ---------------------------------------------------------------------------------------------- LoRA inits
def _single_process_init(model_path: str, method: str, zero3: bool) -> dict[str, torch.Tensor]:
    """What `prepare_model_for_trainer` computes in one process with the harness's settings (seed 0)."""
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, set_seed

    from trl_rlvr_ext.lora_init import get_peft_model_with_init

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    set_seed(0)
    peft_model = get_peft_model_with_init(
        model,
        LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"),
        method,
        autocast_adapter_dtype=not zero3,
        seed=0,
        show_progress=False,
    )
    return {n: p.detach() for n, p in peft_model.named_parameters()}


@pytest.mark.parametrize("mode", ["ddp", *ALL_SHARDED])
@pytest.mark.parametrize("trainer, method", [*(("grpo", m) for m in LORA_METHODS), ("isdpo", "rlpo")])
def test_lora_init_on_sharded_parameters_equals_single_process(launches, tiny_model_path, mode, trainer, method):
    name = f"lora_{method}" if trainer == "grpo" else f"isdpo_lora_{method}"
    left, right = launches.case(mode, name)
    seen = left["seen_at_init"]
    if mode == "zero3":  # the init ran on partitioned weights (ZeRO-3 zero.Init at load): gathered layer by layer
        assert seen["all_partitioned"] and seen["local_numel"] == 0, seen
        assert seen["ds_local_numel"] * 2 == math.prod(seen["ds_shape"]), seen
    else:  # DDP and ZeRO-2 do not partition parameters; FSDP2 shards them at accelerator.prepare (in train()), after the
        # init, which ran on each rank's full weights
        assert not seen["has_ds_id"] and not seen["is_meta"], seen
        # every rank held the checkpoint's weights (not placeholders awaiting rank 0's broadcast) when the init ran
        assert seen["weight_abs_sum"] == right["seen_at_init"]["weight_abs_sum"] > 0, (seen, right["seen_at_init"])
        assert left["sharding"]["all_dtensor"] == (mode == "fsdp2"), left["sharding"]
    assert left["lora_digest"] == right["lora_digest"]  # identical on every rank
    saved = torch.load(Path(launches.root) / mode / f"lora_{trainer}_{method}.pt")
    expected = _single_process_init(tiny_model_path, method, zero3=mode == "zero3")
    assert left["lora_keys"] == len(saved) and len(saved) > 0
    for key, value in saved.items():
        torch.testing.assert_close(value, expected[key], atol=1e-6, rtol=0, msg=f"{mode} {method} {key}")
    assert any("lora_A" in k for k in saved) and any("base_layer" in k for k in saved)


# ---------------------------------------------------------------------------------------------- kill and resume
@pytest.mark.parametrize("mode", ["ddp", "zero2", "zero3", "fsdp2"])
def test_killed_at_step_2_resumes_to_the_bit(launches, mode):
    """SIGKILL of both processes in step 3 (after checkpoint-2 is written), resume: steps 3-4 equal the uninterrupted
    run's to the bit, with NSR (per-rank generators), pass-rate curation and dynamic sampling (shared state) on."""
    uninterrupted = launches.case(mode, "resume_uninterrupted")
    resumed = launches.case(mode, "resume_resumed", phase="resume")
    files = resumed[0]["checkpoint_files"]
    for name in ("clip_recovery_rng_state_0.pth", "clip_recovery_rng_state_1.pth", "curation_state.json"):
        assert name in files, files
    assert "dynamic_sampling_state.json" in files, files
    for rank in (0, 1):
        got, want = resumed[rank], uninterrupted[rank]
        steps = [log for log in got["logs"] if log["step"] > 2]
        assert [log["step"] for log in steps] == [3, 4]
        assert steps == [log for log in want["logs"] if log["step"] > 2], f"{mode} rank {rank}"
        assert got["param_digest"] == want["param_digest"]
        assert got["generator_digest"] == want["generator_digest"]  # NSR's per-rank stream
        assert got["curation"] == want["curation"] and got["stream"] == want["stream"]
    assert uninterrupted[0]["generator_digest"] != uninterrupted[1]["generator_digest"]  # per rank, really
    assert steps[-1]["clip_ratio/region_mean"] > 0, "the clip was not active in the resumed steps: NSR untested"


# ---------------------------------------------------------------------------------------------- refusals
def test_refusals(launches):
    fsdp2 = launches.case("fsdp2", "refuse_fsdp_fallback")[0]
    for trainer in ("grpo", "dpo"):
        assert "silently drops the FSDP plugin" in (fsdp2[trainer]["refused"] or ""), fsdp2
    export = launches.case("fsdp2", "refuse_lora_export_fsdp")[0]["refused"] or ""
    assert "export_converted_adapter" in export, export
    for mode in ("zero2", "zero3"):
        if importlib.util.find_spec("deepspeed") is None:
            continue
        refused = launches.case(mode, "refuse_self_deepspeed")[0]["refused"] or ""
        assert "curation_self_allow_zero_grad_steps" in refused, refused


# ---------------------------------------------------------------------------------------------- the real model
@pytest.mark.parametrize("mode", SHARDED)
def test_real_model_lora_matches_ddp(launches, mode):
    """GRPO + LoRA on SmolLM2-135M-Instruct under ZeRO-3 and FSDP2 (2 processes, parameters sharded: the mode test
    above checks the attention weights are halved per rank): every logged metric equals DDP's to 1e-4 (a 30-layer
    model's reordered float32 sums), the adapter trained, and both ranks hold the same adapter."""
    got, want = launches.case(mode, "real_model_lora"), launches.case("ddp", "real_model_lora")
    assert got[0]["num_layers"] == 30
    assert_logs_close(got[0]["logs"], want[0]["logs"], 1e-4, f"{mode} vs ddp, real model")
    assert got[0]["lora_b_abs_sum"] > 0  # B starts at 0: the adapter moved
    assert got[0]["lora_b_abs_sum"] == pytest.approx(want[0]["lora_b_abs_sum"], rel=1e-3)
    assert got[0]["lora_digest"] == got[1]["lora_digest"]
