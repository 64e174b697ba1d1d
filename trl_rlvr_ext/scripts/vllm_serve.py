"""A vLLM server for ``use_vllm=True, vllm_mode="server"`` on a CPU machine: ``trl-rlvr-ext vllm-serve``.

    trl-rlvr-ext vllm-serve --model toy:base --port 8000          # in the vLLM venv (trl-rlvr-ext setup-vllm-cpu)
    # then train on the same host with vllm_mode: server, vllm_server_base_url: http://127.0.0.1:8000

It runs ``vllm serve`` the way ``trl vllm-serve`` does (``VLLM_SERVER_DEV_MODE=1``, ``--logprobs-mode
processed_logprobs``, ``--max-logprobs -1``), plus what the CPU weight sync needs: the worker extension
``trl_rlvr_ext.grpo.vllm_cpu.CPUWeightSyncExtension``, whose ``reload_weights_from_file`` the trainer calls through the
server's ``/collective_rpc`` after writing its weights to a local safetensors file (``--lora_rank R``: LoRA adapters
served and loaded at run time, for ``vllm_sync="adapter"``). It listens on 127.0.0.1 by
default: the trainer and the server must share a file system, and dev mode's endpoints must not face a network. It
runs eagerly (``--enforce-eager``) unless ``--compile`` is given: torch.compile adds about 30 s to start-up on CPU and
pays off only for larger models. Options it does not know are passed on to ``vllm serve`` as they are.
Standard library only until the server starts (``--help`` imports nothing heavy).
"""

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request


PROG = "trl-rlvr-ext vllm-serve"
WORKER_EXTENSION = "trl_rlvr_ext.grpo.vllm_cpu.CPUWeightSyncExtension"  # the same string as in grpo/vllm_cpu.py


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", required=True, help="Model path, hub id or toy: name (e.g. toy:base).")
    parser.add_argument("--host", default="127.0.0.1", help="Address to listen on (default: this host only).")
    parser.add_argument("--port", type=int, default=8000, help="Port to listen on.")
    parser.add_argument("--dtype", default="auto", help="Weights' dtype in vLLM (auto: bfloat16 for a float32 model).")
    parser.add_argument("--max_model_len", type=int, default=None, help="Context length (prompt + completion).")
    parser.add_argument("--compile", action="store_true", help="Use torch.compile (slower start-up on CPU).")
    parser.add_argument(
        "--lora_rank",
        type=int,
        default=None,
        help="Serve LoRA adapters up to this rank, loaded at run time (the trainer's vllm_sync='adapter').",
    )
    parser.add_argument("--dry_run", action="store_true", help="Print the vllm serve command and exit.")
    return parser


def build_command(args: argparse.Namespace, model_path: str, extra: list[str]) -> list[str]:
    command = [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", model_path]
    command += ["--host", args.host, "--port", str(args.port), "--dtype", args.dtype]
    if args.max_model_len is not None:
        command += ["--max-model-len", str(args.max_model_len)]
    if not args.compile:
        command += ["--enforce-eager"]
    if args.lora_rank is not None:  # vLLM takes only some ranks: the smallest that holds the adapter's
        from ..grpo.vllm_lora import engine_lora_rank

        command += ["--enable-lora", "--max-lora-rank", str(engine_lora_rank(args.lora_rank)), "--max-loras", "1"]
    command += ["--worker-extension-cls", WORKER_EXTENSION]
    command += ["--logprobs-mode", "processed_logprobs", "--max-logprobs", "-1"]
    return command + extra


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on at the moment."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until_up(process: subprocess.Popen, url: str, timeout: float) -> None:
    """Return once ``url``/health answers 200; fail if the server exits first or ``timeout`` seconds pass."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the vLLM server exited with {process.returncode} before it was up")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(1)
    raise TimeoutError(f"the vLLM server was not up after {timeout} s")


def stop(process: subprocess.Popen) -> None:
    """Stop a server started by `start`: SIGTERM to its process group, SIGKILL after 30 s."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)


def start(model: str, port: int, log, *options: str) -> tuple[subprocess.Popen, list[str]]:
    """Start ``trl-rlvr-ext vllm-serve --model MODEL --port PORT OPTIONS`` with this Python, in its own process group
    (so that `stop` ends vLLM's engine process too), its output to ``log``; returns it and its command."""
    command = [
        sys.executable,
        "-m",
        "trl_rlvr_ext.scripts.vllm_serve",
        "--model",
        model,
        "--port",
        str(port),
        *options,
    ]
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    return process, command


@contextlib.contextmanager
def background_server(model: str, log_path: str, *options: str, timeout: float = 240):
    """A server for ``model`` on a free port of 127.0.0.1 while the block runs (benchmarks, tests): yields its URL."""
    port = free_port()
    with open(log_path, "w") as log:
        process, _ = start(model, port, log, *options)
        try:
            wait_until_up(process, f"http://127.0.0.1:{port}", timeout)
            yield f"http://127.0.0.1:{port}"
        finally:
            stop(process)


def cli_main(argv: list[str] | None = None) -> int:
    args, extra = make_parser().parse_known_args(argv)
    from ..data import resolve_model_name_or_path

    command = build_command(args, resolve_model_name_or_path(args.model), extra)
    env = dict(os.environ)
    env["VLLM_SERVER_DEV_MODE"] = "1"  # /collective_rpc and /reset_prefix_cache live behind vLLM's dev mode
    if args.lora_rank is not None:  # /v1/load_lora_adapter, which the adapter sync calls, lives behind this
        env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "1"
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache; vLLM's default fraction of RAM is far too much
    print(" ".join(command), flush=True)
    if args.dry_run:
        return 0
    os.execve(sys.executable, command, env)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(cli_main())
