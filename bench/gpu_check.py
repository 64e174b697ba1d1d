"""One GPU check in one process tree, within a fixed time budget; writes a markdown section for bench/RESULTS.md.

Run it through ``bash bench/gpu_check.sh`` (which installs the carried wheels first, see bench/README.md):

    bash bench/gpu_check.sh              # one CUDA GPU; refuses to start without one
    bash bench/gpu_check.sh --dry-run    # CPU, tiny shapes, float32: the code paths, not measurements (< 1 minute)

Parts, in order, each with a share of the budget (a part stops starting new rounds once its share is spent; unused
time passes to the next part):

1. ``grpo``: ``RLVRGRPOTrainer(clip_recovery="nsr"/"nsr_expected")`` against stock ``trl.GRPOTrainer``, bf16, on a
   random Qwen2-0.5B-shaped model, ``num_iterations=2`` so the clip is active (`bench/grpo_overhead.py`'s two
   measurements: the loss path interleaved on one batch, and whole steps alternated arm by arm).
2. ``dpo``: ``ISDPOTrainer`` (and with behaviour columns) against stock ``trl.DPOTrainer``, bf16, steps interleaved
   on one batch (`bench/dpo_overhead.py`).
3. ``lora_init``: the LoRA initialisers against PEFT's PiSSA on CUDA (`bench/lora_init.py --device cuda`).
4. ``zero3``: ``trl_rlvr_ext.lora_init`` under DeepSpeed ZeRO-3 in one process (``accelerate launch`` with
   ``recipes/accelerate_configs/deepspeed_zero3.yaml``): the init of a partitioned model against the same init
   without DeepSpeed (times and the largest weight difference), then two ``RLVRGRPOTrainer`` steps with
   ``lora_init="rlpo"``. Skipped, saying why, when deepspeed is not importable (after trying to build a carried
   sdist) or there is no CUDA.

A part that fails is reported as failed (exception and message) and the next one runs. The results file is rewritten
after every part, so a run cut short still leaves what it measured.
"""

import argparse
import datetime
import gc
import importlib.metadata
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import zipfile
from pathlib import Path


ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))  # the sibling bench scripts are imported as modules

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SECTION_TITLE = "## GPU check (`bench/gpu_check.sh`)"
DRY_RUN_NOTE = (
    "**Dry run** (CPU, tiny shapes, float32): it checks the script's code paths; its numbers are not measurements. "
    "Do not paste this section into `bench/RESULTS.md`."
)
PARTS = ("grpo", "dpo", "lora_init", "zero3")
PACKAGES = ("torch", "transformers", "trl", "peft", "accelerate", "datasets", "deepspeed")
ZERO3_CONFIG = ROOT / "recipes" / "accelerate_configs" / "deepspeed_zero3.yaml"
WHEEL_DIR = ROOT / ".whl"
DEEPSPEED_SITE = Path(tempfile.gettempdir()) / "gpu_check_deepspeed"

# The sizes of each mode. "share" is the part's fraction of the time left once the model is saved.
SETTINGS = {
    "real": {
        "device": "cuda",
        "shape": "qwen2-0.5b",
        "dtype": "bf16",
        "grpo": {
            "share": 0.28,
            "batch": 32,
            "num_generations": 8,
            "completion_length": 128,
            "repeats": 20,
            "rounds": 3,
            "steps": 5,  # a warm-up step, then two generation cycles (num_iterations=2)
        },
        "dpo": {"share": 0.15, "batch": 16, "prompt_chars": 400, "warmup": 3, "rounds": 5, "steps": 20},
        "lora_init": {
            "share": 0.22,
            "rank": 16,
            "sizes": [("896x896", 3), ("4864x896", 3), ("4096x4096", 3), ("4096x11008", 2)],
        },
        # the deepspeed build (about a minute) and two launches that each import and load the model
        "zero3": {"share": 0.35, "rank": 16, "methods": ["rlpo", "pissa"], "train_steps": 2},
    },
    "dry": {
        "device": "cpu",
        "shape": "dry",
        "dtype": "float32",
        "grpo": {
            "share": 0.35,
            "batch": 8,
            "num_generations": 4,
            "completion_length": 8,
            "repeats": 2,
            "rounds": 1,
            "steps": 3,
        },
        "dpo": {"share": 0.25, "batch": 4, "prompt_chars": 16, "warmup": 1, "rounds": 1, "steps": 2},
        "lora_init": {"share": 0.30, "rank": 4, "sizes": [("64x64", 2), ("48x96", 1)]},
        "zero3": {"share": 0.10, "rank": 4, "methods": ["rlpo", "pissa"], "train_steps": 2},
    },
}


def log(message: str) -> None:
    print(f"[gpu_check {time.strftime('%H:%M:%S')}] {message}", flush=True)


def version_of(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def synchronize() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def free_memory() -> None:
    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def markdown_table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return lines


# ---------------------------------------------------------------------------------------------------------------------
# Environment


def carried_wheel_problems(wheel_dir: Path = WHEEL_DIR) -> list[str]:
    """Requirements of the carried wheels that the environment does not meet (they install with ``--no-deps``)."""
    from packaging.requirements import Requirement
    from packaging.version import Version

    problems = []
    for wheel in sorted(wheel_dir.glob("*.whl")):
        with zipfile.ZipFile(wheel) as archive:
            metadata = next((n for n in archive.namelist() if n.endswith(".dist-info/METADATA")), None)
            text = archive.read(metadata).decode() if metadata else ""
        for line in text.splitlines():
            if not line.startswith("Requires-Dist:"):
                continue
            requirement = Requirement(line.split(":", 1)[1].strip())
            if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
                continue  # an extra's requirement, or one for another platform / Python
            installed = version_of(requirement.name)
            if installed is None:
                problems.append(f"{wheel.name} needs {requirement}: not installed")
            elif requirement.specifier and not requirement.specifier.contains(Version(installed), prereleases=True):
                problems.append(f"{wheel.name} needs {requirement}: found {installed}")
    return problems


def environment(mode: str) -> dict:
    import torch

    info = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "versions": {name: version_of(name) for name in PACKAGES},
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
    }
    if torch.cuda.is_available():
        properties = torch.cuda.get_device_properties(0)
        info["gpu"] = f"{properties.name} ({properties.total_memory / 2**30:.0f} GiB)"
        if shutil.which("nvidia-smi"):
            query = ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]
            result = subprocess.run(query, capture_output=True, text=True, timeout=30, check=False)
            if result.returncode == 0 and result.stdout.strip():
                info["gpu"] += f", driver {result.stdout.strip().splitlines()[0]}"
    else:
        info["gpu"] = f"none (CPU, {torch.get_num_threads()} thread(s))"
    info["wheel_problems"] = carried_wheel_problems() if WHEEL_DIR.is_dir() else None
    return info


# ---------------------------------------------------------------------------------------------------------------------
# Parts. Each returns {"lines": [markdown lines]} (and may record more); it raises on failure.


def part_grpo(cfg: dict, ctx: dict, deadline: float) -> dict:
    import grpo_overhead

    bf16 = ctx["dtype"] == "bf16"
    options = {
        "device": ctx["device"],
        "bf16": bf16,
        "model_dtype": "bfloat16" if bf16 else None,
        "batch": cfg["batch"],
        "num_generations": cfg["num_generations"],
        "completion_length": cfg["completion_length"],
    }
    tmp = ctx["tmp"]
    log(f"grpo: loss path, {cfg['repeats']} interleaved repeats")
    loss = grpo_overhead.loss_path_ratios(ctx["model_path"], os.path.join(tmp, "grpo_loss"), cfg["repeats"], **options)
    free_memory()

    arms = grpo_overhead.ARMS
    ratios = {arm: [] for arm in arms[1:]}
    stock_steps, clipped = [], []
    rounds = 0
    for r in range(cfg["rounds"]):
        if r > 0 and time.monotonic() > deadline:
            log(f"grpo: time share spent, stopping after {rounds} round(s)")
            break
        means = {}
        for arm in arms if r % 2 == 0 else arms[::-1]:
            timer = grpo_overhead.StepTimer()
            trainer = grpo_overhead.make_trainer(
                arm, ctx["model_path"], cfg["steps"], os.path.join(tmp, f"grpo_{arm}"), callbacks=[timer], **options
            )
            trainer.train()
            if arm == "nsr":  # TRL's share of clipped completion tokens, averaged over the run's steps
                logged = [
                    e["clip_ratio/region_mean"] for e in trainer.state.log_history if "clip_ratio/region_mean" in e
                ]
                clipped.extend(logged[-1:])
            del trainer
            free_memory()
            # Generation happens every num_iterations=2 steps: the mean over the steps after the first (warm-up) one,
            # an even number, covers whole generation cycles (a median would pick a generating or a reusing step).
            means[arm] = statistics.fmean(timer.times[1:])
        rounds += 1
        stock_steps.append(means["stock"])
        for arm in arms[1:]:
            ratios[arm].append(means[arm] / means["stock"])
        log(f"grpo: round {rounds}: " + ", ".join(f"{arm} x{ratios[arm][-1]:.3f}" for arm in arms[1:]))

    stock_step = statistics.median(stock_steps)
    rows = []
    worst = 0.0
    for arm in arms[1:]:
        implied = 1.0 + loss["extra_seconds"][arm] / stock_step
        worst = max(worst, implied)
        rows.append(
            [
                f'`clip_recovery="{arm}"`',
                f"{loss['ratios'][arm]:.3f}",
                f"{implied:.3f}",
                f"{statistics.median(ratios[arm]):.3f}",
            ]
        )
    lines = [
        (
            f"{cfg['batch']} completions ({cfg['num_generations']} per prompt) x {cfg['completion_length']} tokens "
            f"per step, `num_iterations=2` (each batch is reused, so the importance ratio moves off 1), "
            f"`epsilon_high=0.28`, `bf16={bf16}`; on the loss path the old log-probs carry noise (sd 0.3), so the clip "
            "binds there. Target: step ratio <= 1.03."
        ),
        "",
        *markdown_table(
            [
                "arm",
                f"loss-path ratio ({cfg['repeats']} interleaved repeats)",
                "implied step ratio",
                f"whole-step ratio ({rounds} alternated rounds)",
            ],
            rows,
        ),
        "",
        (
            f"Stock: loss path {loss['stock_seconds'] * 1e3:.1f} ms (forward + backward of `_compute_loss`), whole "
            f"step {stock_step * 1e3:.0f} ms (mean over {cfg['steps'] - 1} steps after a warm-up step, generation "
            f"included). Clipped share of completion tokens in the NSR arm's whole steps (TRL's "
            f"`clip_ratio/region_mean`): {statistics.median(clipped) if clipped else float('nan'):.4f}. "
            f"Target {'met' if worst <= 1.03 else 'NOT met'} (worst implied step ratio {worst:.3f})."
        ),
    ]
    return {"lines": lines}


def part_dpo(cfg: dict, ctx: dict, deadline: float) -> dict:
    import dpo_overhead

    from trl_rlvr_ext.dpo.behavior import BEHAVIOR_COLUMNS

    bf16 = ctx["dtype"] == "bf16"
    options = {
        "device": ctx["device"],
        "bf16": bf16,
        "model_dtype": "bfloat16" if bf16 else None,
        "prompt_chars": cfg["prompt_chars"],
    }
    arms = ["stock", "is_dpo", "is_dpo_behavior"]
    built = {
        arm: dpo_overhead.build(
            arm, ctx["model_path"], cfg["batch"], os.path.join(ctx["tmp"], f"dpo_{arm}"), **options
        )
        for arm in arms
    }
    sequence_length = built["stock"][1]["input_ids"].shape[1]
    for arm in arms:  # warm-up: allocator, kernels' first launch
        for _ in range(cfg["warmup"]):
            dpo_overhead.step(*built[arm])
    medians = {arm: [] for arm in arms}
    rounds = 0
    for r in range(cfg["rounds"]):
        if r > 0 and time.monotonic() > deadline:
            log(f"dpo: time share spent, stopping after {rounds} round(s)")
            break
        times = {arm: [] for arm in arms}
        for step_index in range(cfg["steps"]):
            for arm in arms if step_index % 2 == 0 else arms[::-1]:  # alternate which arm goes first
                times[arm].append(dpo_overhead.step(*built[arm]))
        for arm in arms:
            medians[arm].append(statistics.median(times[arm]))
        rounds += 1
        log(f"dpo: round {rounds}: " + ", ".join(f"{arm} {1e3 * medians[arm][-1]:.1f} ms" for arm in arms))
    del built
    free_memory()

    names = {
        "stock": "stock `DPOTrainer`",
        "is_dpo": "`ISDPOTrainer` (behaviour = reference)",
        "is_dpo_behavior": f"`ISDPOTrainer` with `{BEHAVIOR_COLUMNS[0]}`/`{BEHAVIOR_COLUMNS[1]}` columns",
    }
    rows = []
    for arm in arms:
        ratio = statistics.median(a / s for a, s in zip(medians[arm], medians["stock"], strict=True))
        rows.append([names[arm], f"{1e3 * statistics.median(medians[arm]):.2f}", f"{ratio:.3f}"])
    lines = [
        (
            f"{cfg['batch']} preference pairs per step, toy prompts padded with {cfg['prompt_chars']} characters of "
            f"text (sequences of {sequence_length} tokens, chosen and rejected in one batch), `bf16={bf16}`; arms "
            f"interleaved step by step on one batch, {rounds} round(s) x {cfg['steps']} steps after {cfg['warmup']} "
            "warm-up steps; a step is TRL's `training_step` plus the optimizer step. Target: step ratio <= 1.02."
        ),
        "",
        *markdown_table(["arm", "step ms (median)", "step ratio (median of per-round ratios)"], rows),
    ]
    return {"lines": lines}


def part_lora_init(cfg: dict, ctx: dict, deadline: float) -> dict:
    import lora_init

    args = argparse.Namespace(rank=cfg["rank"], decay=0.5, device=ctx["device"], repeats=1)
    rows, detail = [], []
    for size, repeats in cfg["sizes"]:
        if rows and time.monotonic() > deadline:
            log(f"lora_init: time share spent, {size} not run")
            rows.append([size.replace("x", "×"), "not run (time share spent)", "", "", "", ""])
            continue
        d_out, d_in = (int(x) for x in size.split("x"))
        args.repeats = repeats
        summary, done = lora_init.run_size(d_out, d_in, args, deadline=deadline)
        pissa = summary["PEFT pissa (full SVD)"]
        rlpo = summary["rlpo (randomized)"]
        rlmo = summary["rlmo (gram f64)"]
        full = summary["rlmo (full SVD f32)"]
        label = size.replace("x", "×")
        rows.append(
            [
                label,
                str(done),
                f"{pissa[0]:.3f} s",
                f"{rlpo[1]:.1f}× / {rlpo[2]:.0e}",
                f"{rlmo[1]:.1f}× / {rlmo[2]:.0e}",
                f"{full[2]:.0e}",
            ]
        )
        for name, (median, speedup, error, energy) in summary.items():
            detail.append([label, name, f"{median:.4f}", f"{speedup:.1f}×", f"{error:.1e}", f"{energy:.1e}"])
        free_memory()
    lines = [
        (
            f"A float32 layer on the {'GPU' if ctx['device'] == 'cuda' else 'CPU'}, r = {cfg['rank']}, power-law "
            "spectrum i^-0.5; speed-up against PEFT's full-SVD `pissa` (median of per-repeat ratios); subspace error = "
            "largest principal-angle sine between the chosen subspace and the exact one. Targets (4096-wide layers): "
            "RLPO >= 10× faster with subspace error <= 1e-2; RLMO no slower."
        ),
        "",
        *markdown_table(
            [
                "layer",
                "repeats",
                "PEFT `pissa`",
                "RLPO speed-up / subspace error",
                "RLMO speed-up / subspace error",
                "float32 full-SVD error on the minor subspace",
            ],
            rows,
        ),
        "",
        "Every contender:",
        "",
        *markdown_table(["layer", "contender", "median s", "speed-up", "subspace error", "energy error"], detail),
    ]
    return {"lines": lines}


def deepspeed_site() -> tuple[str | None, str]:
    """Where deepspeed imports from (None: not available) and how it was found or why not."""
    probe = [sys.executable, "-c", "import deepspeed; print(deepspeed.__version__)"]
    result = subprocess.run(probe, capture_output=True, text=True, timeout=300, check=False)
    if result.returncode == 0:
        return "", f"deepspeed {result.stdout.strip().splitlines()[-1]} was installed"
    reason = (result.stderr.strip().splitlines() or ["no output"])[-1]
    sdists = sorted(WHEEL_DIR.glob("deepspeed-*.tar.gz"))
    if not sdists:
        return None, f"`import deepspeed` failed ({reason}) and no deepspeed sdist was carried in `.whl/`"
    return None, f"`import deepspeed` failed ({reason}); carried sdist {sdists[-1].name} not built yet"


def build_deepspeed(timeout: float) -> tuple[str | None, str]:
    """Build and install the carried deepspeed sdist into a private folder, with no op compiled ahead (DS_BUILD_OPS=0:
    DeepSpeed compiles an op just in time when it is first used; ZeRO-3 with a torch optimizer needs none)."""
    sdist = max(WHEEL_DIR.glob("deepspeed-*.tar.gz"))
    command = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--no-index",
        "--no-deps",
        "--no-build-isolation",
        "--no-cache-dir",
        "--target",
        str(DEEPSPEED_SITE),
        str(sdist),
    ]
    env = {**os.environ, "DS_BUILD_OPS": "0"}
    log(f"zero3: building {sdist.name} (DS_BUILD_OPS=0), at most {timeout:.0f} s")
    start = time.monotonic()
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, check=False)
    except subprocess.TimeoutExpired:
        return None, f"building the carried sdist {sdist.name} took over {timeout:.0f} s"
    if result.returncode != 0:
        tail = " / ".join((result.stdout + result.stderr).strip().splitlines()[-3:])
        return None, f"building the carried sdist {sdist.name} failed: {tail}"
    return str(DEEPSPEED_SITE), f"built from the carried sdist {sdist.name} in {time.monotonic() - start:.0f} s"


def run_zero3_child(stage: str, cfg: dict, ctx: dict, site: str, timeout: float) -> dict:
    """One `accelerate launch` of this file in ZeRO-3 child mode; returns the JSON it writes."""
    out = os.path.join(ctx["tmp"], f"zero3_{stage}.json")
    command = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(ZERO3_CONFIG),
        "--num_processes",
        "1",
        "--main_process_port",
        "29517",
        str(Path(__file__).resolve()),
        "--zero3-child",
        stage,
        "--model",
        ctx["model_path"],
        "--json",
        out,
        "--rank",
        str(cfg["rank"]),
        "--methods",
        ",".join(cfg["methods"]),
        "--steps",
        str(cfg["train_steps"]),
    ]
    env = dict(os.environ)
    if site:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [site, env.get("PYTHONPATH", "")]))
    log(f"zero3: {stage}, at most {timeout:.0f} s")
    try:
        result = subprocess.run(command, env=env, timeout=timeout, check=False)
        returncode = result.returncode
    except subprocess.TimeoutExpired:
        returncode = None
    data = json.loads(Path(out).read_text()) if os.path.exists(out) else {}
    if returncode != 0 and "error" not in data:
        data["error"] = "timed out" if returncode is None else f"exit status {returncode} (see the log above)"
    return data


def part_zero3(cfg: dict, ctx: dict, deadline: float) -> dict:
    import torch

    site, how = deepspeed_site()
    if site is None and ctx["dry_run"]:
        return {"lines": [f"skipped: deepspeed not available ({how}; a dry run does not build it)."], "skipped": True}
    if not torch.cuda.is_available():
        return {"lines": ["skipped: ZeRO-3 here needs a CUDA device, and torch sees none."], "skipped": True}
    if site is None:
        if not sorted(WHEEL_DIR.glob("deepspeed-*.tar.gz")):
            return {"lines": [f"skipped: deepspeed not available ({how})."], "skipped": True}
        site, how = build_deepspeed(max(30.0, deadline - time.monotonic() - 90))
        if site is None:
            return {"lines": [f"skipped: deepspeed not available ({how})."], "skipped": True}
    lines = [f"DeepSpeed: {how}. One process, `accelerate launch --config_file {ZERO3_CONFIG.relative_to(ROOT)}`.", ""]

    init = run_zero3_child("init", cfg, ctx, site, max(30.0, ctx["deadline"] - time.monotonic() - 60))
    if init.get("methods"):
        rows = [
            [
                f"`{method}`",
                f"{entry['plain_seconds']:.2f}",
                f"{entry['zero3_seconds']:.2f}",
                f"{entry['max_abs_diff']:.2e}",
                str(entry["compared"]),
            ]
            for method, entry in init["methods"].items()
        ]
        lines += [
            (
                f'LoRA init of every linear layer (r = {cfg["rank"]}, `target_modules="all-linear"`) of the model '
                f"loaded under ZeRO-3 (partitioned: {init.get('partitioned')}) against the same init without "
                "DeepSpeed, both on the GPU:"
            ),
            "",
            *markdown_table(
                ["method", "init s, no DeepSpeed", "init s, ZeRO-3", "largest weight difference", "weights compared"],
                rows,
            ),
            "",
        ]
    if init.get("error"):
        lines += [f"init: failed: {init['error']}", ""]

    train = run_zero3_child("train", cfg, ctx, site, max(30.0, ctx["deadline"] - time.monotonic() - 20))
    if train.get("seconds") is not None:
        lines.append(
            f'GRPO under ZeRO-3: `RLVRGRPOTrainer(lora_init="rlpo", clip_recovery="nsr")`, {train["steps"]} steps in '
            f"{train['seconds']:.1f} s (ZeRO stage {train.get('zero_stage')}, LoRA init recorded on the model: "
            f"{train.get('lora_init')}), training loss {train.get('loss')}."
        )
    if train.get("error"):
        lines.append(f"train: failed: {train['error']}")
    return {"lines": lines, "failed": bool(init.get("error") or train.get("error"))}


# ---------------------------------------------------------------------------------------------------------------------
# ZeRO-3 child (run under `accelerate launch`)


def zero3_child(args) -> None:
    result: dict = {}

    def save():
        Path(args.json).write_text(json.dumps(result, indent=1))

    try:
        if args.zero3_child == "init":
            zero3_init(args, result, save)
        else:
            zero3_train(args, result, save)
    except BaseException as error:  # recorded for the parent, then re-raised for the exit status and the traceback
        result["error"] = f"{type(error).__name__}: {error}"
        save()
        raise
    save()


def _lora_config(rank: int):
    from peft import LoraConfig

    return LoraConfig(r=rank, lora_alpha=2 * rank, target_modules="all-linear")


def _compared_weights(model) -> dict:
    """Adapter weights, and the base weights of the first two layers' linear modules (PiSSA rewrites them), gathered
    when partitioned (GatheredParameters leaves parameters that DeepSpeed does not manage alone)."""
    import torch

    names = [n for n, _ in model.named_parameters() if "lora_" in n]
    names += [n for n, _ in model.named_parameters() if "base_layer" in n and (".layers.0." in n or ".layers.1." in n)]
    params = dict(model.named_parameters())
    try:
        import deepspeed

        gathered = deepspeed.zero.GatheredParameters([params[n] for n in names])
    except ImportError:
        gathered = None
    if gathered is not None:
        with gathered:
            return {n: params[n].detach().to(torch.float32).cpu().clone() for n in names}
    return {n: params[n].detach().to(torch.float32).cpu().clone() for n in names}


def zero3_init(args, result: dict, save) -> None:
    import deepspeed
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.integrations import HfDeepSpeedConfig

    from trl_rlvr_ext.lora_init import get_peft_model_with_init

    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    else:  # only for trying this child on a CPU (DS_ACCELERATOR=cpu); the check itself skips ZeRO-3 without CUDA
        device = torch.device("cpu")
    result.update(deepspeed=deepspeed.__version__, methods={})
    plain = {}
    for method in args.methods.split(","):  # reference: the same init without DeepSpeed, on the same GPU
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16).to(device)
        synchronize()
        start = time.perf_counter()
        # Adapter weights in the model's dtype, as under ZeRO-3 below: the runs are compared weight for weight.
        peft_model = get_peft_model_with_init(
            model, _lora_config(args.rank), method, autocast_adapter_dtype=False, seed=0, show_progress=False
        )
        synchronize()
        plain[method] = (time.perf_counter() - start, _compared_weights(peft_model))
        del model, peft_model
        free_memory()

    deepspeed.init_distributed()  # one process: RANK, WORLD_SIZE, MASTER_* come from `accelerate launch`
    ds_config = {
        "zero_optimization": {"stage": 3},
        "bf16": {"enabled": True},
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
    }
    keep = HfDeepSpeedConfig(ds_config)  # while it lives, from_pretrained partitions the model (zero.Init)
    for method in args.methods.split(","):
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.bfloat16)
        result["partitioned"] = all(hasattr(p, "ds_id") for p in model.parameters())
        synchronize()
        start = time.perf_counter()
        # TRL passes autocast_adapter_dtype=False under ZeRO-3 (as `prepare_model_for_trainer` does)
        peft_model = get_peft_model_with_init(
            model, _lora_config(args.rank), method, autocast_adapter_dtype=False, seed=0, show_progress=False
        )
        synchronize()
        seconds = time.perf_counter() - start
        weights = _compared_weights(peft_model)
        reference_seconds, reference = plain[method]
        missing = sorted(set(reference) ^ set(weights))
        if missing:
            raise RuntimeError(f"{method}: weights present in one run only, e.g. {missing[:3]}")
        diff = max(float((weights[n] - reference[n]).abs().max()) for n in reference)
        result["methods"][method] = {
            "plain_seconds": reference_seconds,
            "zero3_seconds": seconds,
            "max_abs_diff": diff,
            "compared": len(reference),
        }
        save()
        del model, peft_model
        free_memory()
    del keep


def zero3_train(args, result: dict, save) -> None:
    import torch
    from datasets import Dataset

    from trl_rlvr_ext import RLVRGRPOConfig, RLVRGRPOTrainer
    from trl_rlvr_ext.lora_init import get_lora_init_info

    def reward(completions, **kwargs):
        return [sum(ch.isdigit() for ch in c) / max(len(c), 1) for c in completions]

    config = RLVRGRPOConfig(
        output_dir=os.path.join(os.path.dirname(args.json), "zero3_train"),
        per_device_train_batch_size=8,
        num_generations=8,
        max_completion_length=32,
        num_iterations=2,
        clip_recovery="nsr",
        learning_rate=1e-5,
        max_steps=args.steps,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        bf16=torch.cuda.is_available(),  # False only when trying this child on a CPU (TrainingArguments refuses bf16)
        model_init_kwargs={"dtype": torch.bfloat16},
        lora_init="rlpo",
        disable_tqdm=True,
        seed=0,
    )
    dataset = Dataset.from_dict({"prompt": [f"{i}+{3 * i}=" for i in range(64)]})
    trainer = RLVRGRPOTrainer(
        model=args.model,
        reward_funcs=reward,
        args=config,
        train_dataset=dataset,
        peft_config=_lora_config(args.rank),
    )
    plugin = trainer.accelerator.state.deepspeed_plugin
    result["zero_stage"] = plugin.zero_stage if plugin is not None else None
    if result["zero_stage"] != 3:
        raise RuntimeError(f"the launch did not enable ZeRO-3 (deepspeed plugin: {plugin!r})")
    info = get_lora_init_info(trainer.model)
    result["lora_init"] = info.method if info is not None else None
    if result["lora_init"] != "rlpo":
        raise RuntimeError(f"the trainer's model records LoRA init {result['lora_init']!r}, not 'rlpo'")
    synchronize()
    start = time.perf_counter()
    output = trainer.train()
    synchronize()
    result.update(seconds=time.perf_counter() - start, steps=args.steps, loss=round(float(output.training_loss), 6))


# ---------------------------------------------------------------------------------------------------------------------
# Report


def render(info: dict, ctx: dict, sections: dict, elapsed: dict, total: float, budget: float) -> str:
    from model_shapes import describe

    versions = info["versions"]
    packages = ", ".join(f"{name} {versions[name] or 'not installed'}" for name in PACKAGES if name != "torch")
    weights = "bf16 weights, `bf16=True`" if ctx["dtype"] == "bf16" else "float32 weights, `bf16=False`"
    lines = [SECTION_TITLE, ""]
    if ctx["dry_run"]:
        lines += [DRY_RUN_NOTE, ""]
    lines += [
        f"{info['date']}, GPU: {info['gpu']}; torch {info['torch']} (CUDA {info['cuda']}), {packages}.",
        f"Model: random {ctx['shape']}-shaped Qwen2 ({describe(ctx['shape'])}), {weights}, byte tokenizer. "
        f"Wall time: {total:.0f} s of a {budget:.0f} s budget ("
        + ", ".join(f"{part} {seconds:.0f} s" for part, seconds in elapsed.items())
        + ").",
        "",
    ]
    if info["wheel_problems"]:
        lines += ["Carried wheels whose requirements this environment does not meet (installed with `--no-deps`):", ""]
        lines += [f"- {problem}" for problem in info["wheel_problems"]] + [""]
    titles = {
        "grpo": "### GRPO with NSR against stock `GRPOTrainer`",
        "dpo": "### IS-DPO against stock `DPOTrainer`",
        "lora_init": "### LoRA initialisers (`bench/lora_init.py`)",
        "zero3": "### DeepSpeed ZeRO-3, one process (`trl_rlvr_ext.lora_init`)",
    }
    for part in PARTS:
        lines += [titles[part], ""]
        lines += sections.get(part, ["not run: the time budget was spent before this part."]) + [""]
    return "\n".join(lines).rstrip() + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dry-run", action="store_true", help="CPU, tiny shapes, float32: exercise the code paths")
    parser.add_argument("--out", default=None, help="results file (default: $OUT/gpu_results.md, else bench/...)")
    parser.add_argument("--budget", type=float, default=None, help="seconds for everything (default 540; dry 120)")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated subset of {','.join(PARTS)}")
    # ZeRO-3 child mode (internal)
    parser.add_argument("--zero3-child", choices=["init", "train"], default=None, help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--json", help=argparse.SUPPRESS)
    parser.add_argument("--rank", type=int, default=16, help=argparse.SUPPRESS)
    parser.add_argument("--methods", default="rlpo", help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, default=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.zero3_child:
        zero3_child(args)
        return 0

    start = time.monotonic()
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        parser.error(f"unknown part(s) {unknown}; choose from {', '.join(PARTS)}")
    import torch

    if not args.dry_run and not torch.cuda.is_available():
        print(
            "error: the GPU check needs a CUDA device and torch sees none "
            f"(torch {torch.__version__}, CUDA build {torch.version.cuda}). Run it on a machine with one NVIDIA GPU, "
            "or pass --dry-run to exercise the code paths on the CPU.",
            file=sys.stderr,
        )
        return 2
    mode = "dry" if args.dry_run else "real"
    settings = SETTINGS[mode]
    budget = args.budget if args.budget is not None else (120.0 if args.dry_run else 540.0)
    if args.out:
        out = Path(args.out)
    elif os.environ.get("OUT"):
        out = Path(os.environ["OUT"]) / "gpu_results.md"
    else:
        out = ROOT / "bench" / "gpu_results.md"
    out.parent.mkdir(parents=True, exist_ok=True)

    import datasets
    import transformers
    from model_shapes import save_shaped_model

    datasets.disable_progress_bars()
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    info = environment(mode)
    log(f"{mode} run, budget {budget:.0f} s, GPU: {info['gpu']}, results -> {out}")
    for problem in info["wheel_problems"] or []:
        log(f"note: {problem}")
    elapsed, sections = {}, {}
    failed, not_run = [], []
    with tempfile.TemporaryDirectory(prefix="gpu_check_") as tmp:
        ctx = {
            "dry_run": args.dry_run,
            "device": settings["device"],
            "shape": settings["shape"],
            "dtype": settings["dtype"],
            "tmp": tmp,
            "deadline": start + budget - 10,  # room to write the file
        }
        t = time.monotonic()
        ctx["model_path"] = save_shaped_model(
            os.path.join(tmp, "model"), settings["shape"], settings["dtype"], device=settings["device"]
        )
        elapsed["model"] = time.monotonic() - t
        log(f"model saved in {elapsed['model']:.0f} s")
        schedule = time.monotonic()
        available = ctx["deadline"] - schedule
        share = 0.0
        interrupted = False
        for part in PARTS:
            share += settings[part]["share"]
            if part not in parts:
                sections[part] = ["not run (not selected with --parts)."]
                continue
            if interrupted or time.monotonic() > ctx["deadline"]:
                not_run.append(part)  # rendered as "not run: the time budget was spent"
                continue
            deadline = min(schedule + share * available, ctx["deadline"])
            t = time.monotonic()
            log(f"{part}: start, share ends in {deadline - t:.0f} s")
            try:
                outcome = globals()[f"part_{part}"](settings[part], ctx, deadline)
                sections[part] = outcome["lines"]
                if outcome.get("failed"):
                    failed.append(part)
            except KeyboardInterrupt:  # the shell's timeout: keep what was measured
                sections[part] = ["interrupted: the time budget ran out during this part."]
                interrupted = True
            except Exception as error:  # noqa: BLE001 -- a failed part is reported, and the next part still runs
                traceback.print_exc()
                sections[part] = [f"failed: {type(error).__name__}: {error}"]
                failed.append(part)
            elapsed[part] = time.monotonic() - t
            free_memory()
            log(f"{part}: done in {elapsed[part]:.0f} s (total {time.monotonic() - start:.0f} s)")
            out.write_text(render(info, ctx, sections, elapsed, time.monotonic() - start, budget))
        out.write_text(render(info, ctx, sections, elapsed, time.monotonic() - start, budget))
    log(
        f"wrote {out} ({time.monotonic() - start:.0f} s); failed parts: {', '.join(failed) or 'none'}; "
        f"not run for lack of time: {', '.join(not_run) or 'none'}"
    )
    return 1 if failed or not_run or interrupted else 0


if __name__ == "__main__":
    sys.exit(main())
