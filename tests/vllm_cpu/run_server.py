"""GRPO + NSR against a vLLM server on CPU (``trl-rlvr-ext vllm-serve``, 127.0.0.1, a free port), in the vLLM venv.

Run by tests/test_vllm_cpu.py (``python tests/vllm_cpu/run_server.py OUT.json WORKDIR``). It starts the server
itself, waits for it (bounded), trains, and stops it (SIGTERM to its process group, then SIGKILL), whatever happens.

- ``stale``: a trainer whose sync is disabled (the server keeps the initial weights): the gap check must catch it;
- ``nsr``: clip_recovery="nsr" with batch reuse; the weights go through a local safetensors file and the server's
  /collective_rpc (`trl_rlvr_ext.grpo.vllm_cpu.CPUWeightSync`), the gap must stay at float32 level;
- ``resume``: an uninterrupted run that saves at step 2 and a run resumed from that checkpoint: the server's sampling
  state is in it (`trl_rlvr_ext.grpo.vllm_state`), so steps 3-4 match to the bit; resumed without that file, they
  must not;
- ``death``: the server is killed after step 2 of a run that saves no checkpoint: the run stops with
  `VLLMServerDiedError` naming the checkpoint it saved first; a new server is started and the run resumes from that
  checkpoint, and its steps 3-4 match the uninterrupted run's to the bit;
- ``lora_adapter_pissa``, ``lora_adapter_default``: LoRA with ``vllm_sync="adapter"`` (the server runs with
  ``--lora_rank 4``): the adapter crosses as a safetensors folder loaded by ``/v1/load_lora_adapter`` under a fresh
  name each sync; the base crosses once, at the first sync (PiSSA's residual base; for the default init because the
  server holds another run's weights by then);
- ``toy_lora_recipe``: the packaged recipe toy_nsr_vllm_lora (colocate, LoRA, the adapter sync) for two steps, last
  (its CLI tears torch.distributed down; this process builds no colocated engine before it).
"""

import json
import subprocess
import sys
import time
import traceback
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_colocate import (
    CompletionRecorder,
    base_kwargs,
    build,
    deterministic,
    digit_reward,
    logp_gaps,
    lora_adapter_run,
    resume_pair,
    run_toy_recipe,
    train_records,
)

from trl_rlvr_ext.scripts.vllm_serve import free_port, stop, wait_until_up
from trl_rlvr_ext.scripts.vllm_serve import start as start_server


STARTUP_TIMEOUT_S = 240


def server_kwargs(url):
    return {"vllm_mode": "server", "vllm_server_base_url": url, "vllm_engine_kwargs": None}


def resume_feature(model, work, url, server, command, port):
    kwargs = base_kwargs(work / "resume", clip_recovery="nsr", loss_type="dapo", **server_kwargs(url))
    return resume_pair(model, kwargs, strip=("vllm_server_sampling.json",)), server


class KillServerAt:
    """A callback that kills the server (its whole process group) once ``step`` steps are done."""

    def __init__(self, server, step):
        from transformers import TrainerCallback

        self.server, self.step = server, step
        self.callback = type("Kill", (TrainerCallback,), {"on_step_end": self.on_step_end})()

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            stop(self.server)


def death_feature(model, work, url, server, command, port):
    """Kill the server after step 2 (no checkpoint planned): the run must stop with a clear error after saving
    checkpoint-2; a new server, and the resumed run's steps 3-4 equal the uninterrupted run's (`resume_feature`)."""
    from trl_rlvr_ext.grpo.vllm_state import VLLMServerDiedError

    out_dir = work / "death"
    kwargs = base_kwargs(out_dir, clip_recovery="nsr", loss_type="dapo", max_steps=4, **server_kwargs(url))
    trainer = build(model, CompletionRecorder(), kwargs)
    trainer.add_callback(KillServerAt(server, 2).callback)
    result = {"error_type": None}
    try:
        trainer.train()
    except VLLMServerDiedError as error:
        result["error_type"], result["message"] = type(error).__name__, str(error)
    result["checkpoints"] = sorted(p.name for p in out_dir.glob("checkpoint-*"))
    checkpoint = out_dir / "checkpoint-2"
    result["checkpoint_files"] = sorted(p.name for p in checkpoint.iterdir()) if checkpoint.is_dir() else []
    # the same server again (same model and options, the same port), and the run resumed from its checkpoint
    log = open(work / "server2.log", "w")  # noqa: SIM115 -- open while the server runs
    server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    wait_until_up(server, url, STARTUP_TIMEOUT_S)
    reward = CompletionRecorder()
    again = build(model, reward, {**kwargs, "output_dir": str(out_dir) + "-resumed"})
    again.train(resume_from_checkpoint=str(checkpoint))
    result["resumed"] = deterministic(train_records(again))[2:]  # after the checkpoint's 2 steps
    result["resumed_completions"] = reward.completions
    return result, server


def main(argv):
    out_path, work = Path(argv[0]), Path(argv[1])
    work.mkdir(parents=True, exist_ok=True)
    from trl_rlvr_ext.toy import VLLM_SHAPE, save_tiny_model

    model = str(work / "toy-vllm")
    if not (Path(model) / "config.json").is_file():
        save_tiny_model(model, **VLLM_SHAPE)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = open(work / "server.log", "w")  # noqa: SIM115 -- open while the server runs, closed in `finally`
    start = time.time()
    server, command = start_server(
        model, port, log, "--dtype", "float32", "--max_model_len", "128", "--lora_rank", "4"
    )
    results = {"_meta": {"command": command}}
    try:
        wait_until_up(server, url, STARTUP_TIMEOUT_S)
        results["_meta"]["startup_s"] = time.time() - start
        server_kwargs = {"vllm_mode": "server", "vllm_server_base_url": url, "vllm_engine_kwargs": None}
        for name in ("stale", "nsr"):
            t0 = time.time()
            try:
                kwargs = base_kwargs(work / name, clip_recovery="nsr", loss_type="dapo", **server_kwargs)
                trainer = build(model, digit_reward, kwargs)
                if name == "stale":
                    trainer.vllm_generation.sync_weights = lambda: None
                trainer.train()
                results[name] = {
                    "gaps": logp_gaps(trainer),
                    "records": train_records(trainer),
                    "sync": type(trainer._vllm_cpu_sync).__name__,
                    "num_syncs": getattr(trainer._vllm_cpu_sync, "num_syncs", None),
                }
            except Exception:  # noqa: BLE001 -- recorded for the test to report
                results[name] = {"error": traceback.format_exc()[-4000:]}
            results[name]["seconds"] = time.time() - t0
            out_path.write_text(json.dumps(results, indent=1, default=str))
        for name, feature in (("resume", resume_feature), ("death", death_feature)):
            t0 = time.time()
            try:
                results[name], server = feature(model, work, url, server, command, port)
            except Exception:  # noqa: BLE001 -- recorded for the test to report
                results[name] = {"error": traceback.format_exc()[-4000:]}
            results[name]["seconds"] = time.time() - t0
            out_path.write_text(json.dumps(results, indent=1, default=str))
        for init in ("pissa", "default"):
            name, t0 = f"lora_adapter_{init}", time.time()
            try:
                kwargs = base_kwargs(work / name, max_steps=3, **server_kwargs)
                results[name] = lora_adapter_run(model, kwargs, None if init == "default" else init)
            except Exception:  # noqa: BLE001 -- recorded for the test to report
                results[name] = {"error": traceback.format_exc()[-4000:]}
            results[name]["seconds"] = time.time() - t0
            out_path.write_text(json.dumps(results, indent=1, default=str))
        # last: the CLI tears torch.distributed down. This process builds no colocated engine before it.
        name, t0 = "toy_lora_recipe", time.time()
        try:
            results[name] = run_toy_recipe(work, "toy_nsr_vllm_lora")
        except Exception:  # noqa: BLE001 -- recorded for the test to report
            results[name] = {"error": traceback.format_exc()[-4000:]}
        results[name]["seconds"] = time.time() - t0
        out_path.write_text(json.dumps(results, indent=1, default=str))
    except Exception:  # noqa: BLE001
        results["_meta"]["error"] = traceback.format_exc()[-3000:]
    finally:
        stop(server)
        log.close()
        results["_meta"]["total_s"] = time.time() - start
        results["_meta"]["server_log_tail"] = (work / "server.log").read_text()[-3000:]
        out_path.write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
