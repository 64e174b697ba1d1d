"""GRPO + NSR against a vLLM server on CPU (``trl-rlvr-ext vllm-serve``, 127.0.0.1, a free port), in the vLLM venv.

Run by tests/test_vllm_cpu.py (``python tests/vllm_cpu/run_server.py OUT.json WORKDIR``). It starts the server
itself, waits for it (bounded), trains, and stops it (SIGTERM to its process group, then SIGKILL), whatever happens.

- ``stale``: a trainer whose sync is disabled (the server keeps the initial weights): the gap check must catch it;
- ``nsr``: clip_recovery="nsr" with batch reuse; the weights go through a local safetensors file and the server's
  /collective_rpc (`trl_rlvr_ext.grpo.vllm_cpu.CPUWeightSync`), the gap must stay at float32 level.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import traceback
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_colocate import base_kwargs, build, digit_reward, logp_gaps, train_records


STARTUP_TIMEOUT_S = 240


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_server(process, url, timeout):
    import requests

    deadline = time.time() + timeout
    while time.time() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the vLLM server exited with {process.returncode} before it was up")
        try:
            if requests.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(1)
    raise TimeoutError(f"the vLLM server was not up after {timeout} s")


def stop(process):
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)


def main(argv):
    out_path, work = Path(argv[0]), Path(argv[1])
    work.mkdir(parents=True, exist_ok=True)
    from trl_rlvr_ext.toy import VLLM_SHAPE, save_tiny_model

    model = str(work / "toy-vllm")
    if not (Path(model) / "config.json").is_file():
        save_tiny_model(model, **VLLM_SHAPE)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "trl_rlvr_ext.scripts.vllm_serve", "--model", model, "--port", str(port)]
    command += ["--dtype", "float32", "--max_model_len", "128"]
    results = {"_meta": {"command": command}}
    start = time.time()
    log = open(work / "server.log", "w")  # noqa: SIM115 -- open while the server runs, closed in `finally`
    server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for_server(server, url, STARTUP_TIMEOUT_S)
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
