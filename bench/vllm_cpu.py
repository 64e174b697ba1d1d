"""GRPO step time with vLLM's CPU build (colocate) against transformers ``generate``, side by side in one process.

    python bench/vllm_cpu.py [--rounds 2] [--steps 6] [--batch 8] [--completion-length 32]
    python bench/vllm_cpu.py --quick      # make bench-quick's run (bench/quick.py): 1 round of 3 steps, eager vLLM
    python bench/vllm_cpu.py --model smollm2-135m-instruct --arms vllm   # a real pretrained model instead of the shapes
    python bench/vllm_cpu.py --model smollm2-135m-instruct --arms vllm,vllm_server   # colocate and server mode

Needs the vLLM venv (``trl-rlvr-ext setup-vllm-cpu``); run from the main venv, it re-runs itself in
``$TRL_RLVR_EXT_VLLM_VENV`` (default ``~/.cache/trl_rlvr_ext/vllm-cpu-venv``) and fails, naming the command, when
there is none. Two shapes, both random, both with vLLM-compatible heads (head size 32 / 64):

- ``toy-vllm``: `trl_rlvr_ext.toy.VLLM_SHAPE` (hidden 64, 2 layers, tied head; ~0.1 M parameters);
- ``small``: hidden 256, 4 layers, 4 heads, intermediate 1024 (~3.3 M parameters, ~30x the toy).

For each shape and each of ``--rounds`` rounds, one GRPO run per arm (``use_vllm=False``: TRL's transformers
``generate``; ``use_vllm=True``: colocated vLLM in float32, synced by `trl_rlvr_ext.grpo.vllm_cpu`, eager
(``vllm``) and with vLLM's default torch.compile (``vllm_compiled``, ~30 s more to build each engine); ``vllm_server``:
server mode against a ``trl-rlvr-ext vllm-serve`` of the same model in float32, started once per model, its weights
synced through a local file and each prompt sent as its own seeded request (`trl_rlvr_ext.grpo.vllm_state`; the
server is another process, so it can use the second core while the trainer waits); ``--arms`` picks the vLLM arms),
alternated
arm by arm so machine-load drift hits both. Timed: every optimizer step after the first (a step includes the weight
sync and generation), and each generation call (``_generate_single_turn``). Printed: medians per arm and the ratios
of medians (transformers / vLLM: > 1 means vLLM is faster). ``OMP_NUM_THREADS=1`` (vLLM makes
``torch.set_num_threads`` a no-op; 2 threads were 5-15x slower under load on 2 shared cores).
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path


os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SHAPES = {
    "toy-vllm": None,  # trl_rlvr_ext.toy.VLLM_SHAPE
    "small": {
        "hidden_size": 256,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 1024,
    },
}
ARMS = ("transformers", "vllm", "vllm_compiled", "vllm_server")

try:  # run as a script (bench/ on sys.path) or imported as bench.vllm_cpu
    from quick import quick_defaults
except ImportError:
    from bench.quick import quick_defaults


def _reexec_in_vllm_venv(script: str = __file__) -> None:
    """Run ``script`` (this one by default) again with the vLLM venv's python when vLLM is not importable here."""
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        return
    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root))
    from trl_rlvr_ext.scripts.setup_vllm_cpu import default_venv_dir

    python = default_venv_dir() / "bin" / "python"
    if not python.exists():
        sys.exit(
            f"bench/{Path(script).name} needs the vLLM CPU venv; none at {python.parent.parent}. Create it with "
            f"`python -m trl_rlvr_ext.scripts.setup_vllm_cpu {python.parent.parent}` (or set TRL_RLVR_EXT_VLLM_VENV)."
        )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    os.execve(str(python), [str(python), script, *sys.argv[1:]], env)


def reward(completions, **kwargs):
    return [sum(ch.isdigit() for ch in c) / max(len(c), 1) for c in completions]


def step_timer():
    """A callback that times every optimizer step (``.times``, seconds)."""
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.times, self.start = [], None

        def on_step_begin(self, args, state, control, **kwargs):
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.times.append(time.perf_counter() - self.start)

    return StepTimer()


def run_arm(arm, model_path, out_dir, steps, batch, completion_length, server_url=None):
    from datasets import Dataset
    from transformers import PrinterCallback

    from trl_rlvr_ext import RLVRGRPOConfig, RLVRGRPOTrainer

    vllm = {"use_vllm": True, "vllm_mode": "colocate", "vllm_max_model_length": 256}
    vllm["vllm_engine_kwargs"] = {"enforce_eager": arm == "vllm", "dtype": "float32"}
    if arm == "vllm_server":
        vllm = {"use_vllm": True, "vllm_mode": "server", "vllm_server_base_url": server_url}
    args = RLVRGRPOConfig(
        output_dir=out_dir, per_device_train_batch_size=batch, num_generations=4,
        max_completion_length=completion_length, learning_rate=1e-3, max_steps=steps, logging_steps=steps,
        save_strategy="no", report_to="none", use_cpu=True, bf16=False, seed=0, disable_tqdm=True,
        **(vllm if arm.startswith("vllm") else {}),
    )  # fmt: skip
    dataset = Dataset.from_dict({"prompt": [f"{i}+{3 * i}=" for i in range(256)]})
    timer = step_timer()
    trainer = RLVRGRPOTrainer(model_path, reward, args=args, train_dataset=dataset, callbacks=[timer])
    trainer.remove_callback(PrinterCallback)
    generation_times, generate = [], trainer._generate_single_turn

    def timed_generate(*a, **kw):
        start = time.perf_counter()
        out = generate(*a, **kw)
        generation_times.append(time.perf_counter() - start)
        return out

    trainer._generate_single_turn = timed_generate
    trainer.train()
    del trainer
    return timer.times[1:], generation_times[1:]  # the first step / call warms up (allocations, engine caches)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--batch", type=int, default=8, help="Completions per step (4 per prompt).")
    parser.add_argument("--completion-length", type=int, default=32)
    parser.add_argument(
        "--model", default=None, help="A pretrained model name (smollm2-135m-instruct) or path, instead of the shapes."
    )
    parser.add_argument("--arms", default="vllm,vllm_compiled", help="The vLLM arms (transformers always runs).")
    quick_defaults(parser, None, rounds=1, steps=3, arms="vllm")
    args = parser.parse_args()
    arms = ("transformers", *(a for a in args.arms.split(",") if a))
    unknown = sorted(set(arms) - set(ARMS))
    if unknown:
        parser.error(f"--arms: unknown {unknown}; choose among {', '.join(ARMS[1:])}.")
    _reexec_in_vllm_venv()
    import contextlib
    import gc

    import vllm
    from safetensors.torch import load_file

    from trl_rlvr_ext.scripts.vllm_serve import background_server
    from trl_rlvr_ext.toy import VLLM_SHAPE, save_tiny_model

    print(f"vllm {vllm.__version__}, OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}, batch {args.batch}, "
          f"{args.completion_length} tokens, {args.rounds} rounds x {args.steps} steps")  # fmt: skip
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        if args.model:
            from trl_rlvr_ext.data import resolve_model_name_or_path

            models = {Path(args.model).name: resolve_model_name_or_path(args.model)}
        else:
            models = {
                shape: save_tiny_model(os.path.join(tmp, shape), **(dims or VLLM_SHAPE))
                for shape, dims in SHAPES.items()
            }
        for shape, path in models.items():
            num_params = sum(t.numel() for f in Path(path).glob("*.safetensors") for t in load_file(str(f)).values())
            steps = {arm: [] for arm in arms}
            gens = {arm: [] for arm in arms}
            with contextlib.ExitStack() as stack:
                url = None
                if "vllm_server" in arms:  # one server per model, up before the first round
                    server = background_server(path, os.path.join(tmp, f"{shape}-server.log"), "--dtype", "float32",
                                               "--max_model_len", "256")  # fmt: skip
                    url = stack.enter_context(server)
                for r in range(args.rounds):
                    for arm in arms if r % 2 == 0 else reversed(arms):
                        s, g = run_arm(arm, path, os.path.join(tmp, f"{shape}-{arm}-{r}"), args.steps, args.batch,
                                       args.completion_length, server_url=url)  # fmt: skip
                        steps[arm] += s
                        gens[arm] += g
                        gc.collect()
            med = {arm: (statistics.median(steps[arm]), statistics.median(gens[arm])) for arm in arms}
            rows.append((shape, num_params, med))
    print(f"\n{'shape':<10}{'params':>8}  {'vLLM arm':<14}{'step tf':>9}{'step vllm':>11}{'ratio':>7}"
          f"  {'gen tf':>9}{'gen vllm':>10}{'ratio':>7}")  # fmt: skip
    for shape, num_params, med in rows:
        (st, gt) = med["transformers"]
        for arm in arms[1:]:
            sv, gv = med[arm]
            step = f"{st:>8.3f}s{sv:>10.3f}s{st / sv:>6.2f}x"
            print(f"{shape:<10}{num_params / 1e6:>7.2f}M  {arm:<14}{step}  {gt:>8.3f}s{gv:>9.3f}s{gt / gv:>6.2f}x")
    print("\nratio = transformers median / vLLM median (> 1: vLLM faster). Medians over every step after the first.")


if __name__ == "__main__":
    main()
