"""LoRA adapter sync to vLLM (``vllm_sync="adapter"``): vLLM serves the adapter itself, only its tensors cross.

TRL's sync (and `CPUWeightSync`, which reads the weights the same way) merges a PEFT adapter into the base and ships
every weight at each sync. vLLM serves LoRA adapters itself (``enable_lora=True``; its CPU build too, through
``PunicaWrapperCPU``), so with a LoRA model only the adapter needs to cross: r x (d_in + d_out) numbers per targeted
module instead of d_in x d_out, plus the unchanged base once where it differs from what vLLM loaded.

- **The base, once.** vLLM loads the base from ``model.name_or_path``. RLPO/RLMO (B0 = 0) and PEFT's default init
  leave it; PiSSA/MiLoRA rewrite it to the residual W - gamma B0 A0 (`trl_rlvr_ext.lora_init`). At the first sync of a
  trainer the base tensors are compared with that checkpoint (`base_differs_from_checkpoint`); where they differ they
  go once through vLLM's reload path (`trl_rlvr_ext.grpo.vllm_cpu.reload_weights`), which works on an engine with
  LoRA enabled. A server may hold another run's base: it is asked (`BASE_STATE_METHOD`) and given the base unless it
  still holds the checkpoint it started with and the trainer's base equals it. The base is frozen under LoRA (any
  trainable tensor outside the adapter refuses the adapter sync), so it never needs to cross again. A resumed run
  builds a new trainer (and, colocated, a new engine): its first sync does the same check, so it re-sends what is
  needed.
- **Colocate.** Each sync builds a vLLM ``LoRAModel`` from the adapter tensors in memory
  (``LoRAModel.from_lora_tensors``, the step vLLM's own ``WorkerLoRAManager._load_adapter`` runs after reading a
  folder) and adds it to the worker's LoRA manager under a fresh id; the engine's ``generate`` then gets
  ``LoRARequest(name, id, ...)`` for every request. A fresh id per sync means vLLM's adapter cache can never serve a
  stale adapter; the previous one is removed.
- **Server.** Each sync writes ``adapter_model.safetensors`` and ``adapter_config.json`` to a new local folder and
  asks the server to load it under a fresh name (vLLM's ``/v1/load_lora_adapter``, enabled by ``trl-rlvr-ext
  vllm-serve --lora_rank R``); the client's requests then name that adapter as their model, and the previous one is
  unloaded.

Where vLLM's LoRA does not cover the adapter (`adapter_refusal`: DoRA, LoRA on the embeddings or the LM head,
``modules_to_save``, a LoRA bias, trainable tensors outside the adapter, several adapters, ZeRO-3 / FSDP sharding,
sleep mode) the merged sync runs and one log line says why (`ADAPTER_FALLBACK_LOG`).
"""

import json
import logging
import os
import shutil
import tempfile
import time
import uuid
import weakref

import torch

from .vllm_cpu import CPUWeightSync, cpu_copies, reload_weights


logger = logging.getLogger(__name__)

VLLM_SYNC_MODES = ("merged", "adapter")
# vllm.config.lora.MaxLoRARanks (vLLM 0.32): the engine's max_lora_rank must be one of these
VLLM_MAX_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
# The decoder's linear layers vLLM wraps with LoRA in its Llama/Qwen2/Mistral-style models (checkpoint names; vLLM
# packs q/k/v into qkv_proj and gate/up into gate_up_proj and splits the adapter accordingly)
DECODER_LORA_MODULES = frozenset({"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"})
# The worker-extension method a server answers with whether it still holds the checkpoint it started with
BASE_STATE_METHOD = "holds_start_up_weights"
ADAPTER_NAME = "trl_rlvr_ext_adapter"
SENT_RECORDS = 100  # the syncs `CPUAdapterSync.sent` keeps (the latest)
ADAPTER_FALLBACK_LOG = (
    "vllm_sync='adapter': {reason}; the merged sync runs instead (every weight crosses at each sync)."
)


def engine_lora_rank(rank: int) -> int:
    """The smallest ``max_lora_rank`` vLLM accepts that holds an adapter of rank ``rank``."""
    for allowed in VLLM_MAX_LORA_RANKS:
        if allowed >= rank:
            return allowed
    raise ValueError(f"LoRA rank {rank} is above vLLM's largest max_lora_rank ({VLLM_MAX_LORA_RANKS[-1]}).")


def config_refusal(lora_config) -> str | None:
    """Why vLLM's LoRA cannot serve an adapter of this ``peft.LoraConfig`` (None: it can, as far as the config says)."""
    from peft import LoraConfig

    if not isinstance(lora_config, LoraConfig):
        return f"the adapter is a {type(lora_config).__name__}, vLLM serves LoRA (peft.LoraConfig) only"
    checks = (
        (getattr(lora_config, "use_dora", False), "DoRA (use_dora=True) is not served by vLLM's LoRA"),
        (lora_config.modules_to_save, f"modules_to_save={lora_config.modules_to_save} trains full modules"),
        (lora_config.bias != "none", f"bias={lora_config.bias!r} trains biases vLLM's LoRA does not hold"),
        (getattr(lora_config, "lora_bias", False), "lora_bias=True is not served by vLLM's LoRA"),
        (getattr(lora_config, "trainable_token_indices", None), "trainable_token_indices trains embedding rows"),
        (getattr(lora_config, "target_parameters", None), "target_parameters (LoRA on parameters) is not served"),
        (getattr(lora_config, "layer_replication", None), "layer_replication is not served by vLLM's LoRA"),
        (getattr(lora_config, "use_qalora", False), "QALoRA is not served by vLLM's LoRA"),
    )
    for refused, reason in checks:
        if refused:
            return reason
    return None


def lora_module_names(model) -> list[str]:
    """The names of the modules the model's (single) LoRA adapter wraps."""
    from peft.tuners.lora import LoraLayer

    return [name for name, module in model.named_modules() if isinstance(module, LoraLayer)]


def adapter_refusal(model, args, supported_modules=DECODER_LORA_MODULES) -> str | None:
    """Why the adapter sync cannot serve this trainer's model (None: it can). ``supported_modules`` are the module
    leaf names vLLM's LoRA wraps in the served model."""
    from accelerate.utils import is_peft_model

    if not is_peft_model(model):
        return "the model has no PEFT adapter"
    if len(model.peft_config) != 1:
        return f"the model has {len(model.peft_config)} adapters ({sorted(model.peft_config)}), vLLM serves one"
    reason = config_refusal(next(iter(model.peft_config.values())))
    if reason:
        return reason
    leaves = sorted({name.rsplit(".", 1)[-1] for name in lora_module_names(model)} - set(supported_modules))
    if leaves:
        return f"vLLM's LoRA does not wrap the targeted modules {leaves} (it wraps {sorted(supported_modules)})"
    trainable = [n for n, p in model.named_parameters() if p.requires_grad and model.prefix not in n]
    if trainable:
        return f"{len(trainable)} trainable tensors lie outside the adapter (e.g. {trainable[0]})"
    if getattr(args, "vllm_enable_sleep_mode", False):
        return "vllm_enable_sleep_mode=True discards vLLM's base weights at each sleep"
    deepspeed = getattr(args, "deepspeed_plugin", None)
    if getattr(args, "fsdp", None) or (deepspeed is not None and getattr(deepspeed, "zero_stage", 0) == 3):
        return "the base is sharded (ZeRO-3 / FSDP) and gathered at each sync anyway"
    return None


def adapter_config_dict(model) -> dict:
    """The adapter's ``adapter_config.json`` as vLLM reads it. ``init_lora_weights`` is set to True: the tensors are a
    plain LoRA adapter, and where the init rewrote the base (PiSSA, MiLoRA) the residual base is sent to vLLM itself
    (vLLM refuses those inits by name, as the base it would load is not the residual)."""
    config = next(iter(model.peft_config.values())).to_dict()
    config = json.loads(json.dumps(config, default=lambda value: sorted(value) if isinstance(value, set) else None))
    config["init_lora_weights"] = True
    return config


def adapter_tensors(model) -> dict[str, torch.Tensor]:
    """The adapter's tensors under PEFT's saved names (``base_model.model.<module>.lora_A.weight``, ...), as contiguous
    CPU copies: what crosses to vLLM at each sync."""
    from peft import get_peft_model_state_dict

    return cpu_copies(get_peft_model_state_dict(model).items())


def base_tensors(model, fix_name) -> list[tuple[str, torch.Tensor]]:
    """The base's tensors under vLLM's checkpoint names (as TRL names them, without merging the adapter)."""
    out = []
    for name, param in model.named_parameters():
        if model.prefix in name:
            continue
        out.append((fix_name(name.removeprefix("base_model.model.").replace(".base_layer", "")), param.data))
    return out


def base_differs_from_checkpoint(base: list[tuple[str, torch.Tensor]], path: str) -> str | None:
    """Why the trainer's base is not the checkpoint at ``path`` vLLM loaded (None: every tensor equal)."""
    import glob

    from safetensors import safe_open

    files = sorted(glob.glob(os.path.join(str(path), "*.safetensors")))
    if not files:
        return f"no safetensors checkpoint at {path} to compare with"
    handles = [safe_open(f, framework="pt") for f in files]
    where = {key: handle for handle in handles for key in handle.keys()}  # noqa: SIM118 -- safe_open has no __iter__
    for name, tensor in base:
        if name not in where:
            return f"{name} is not in the checkpoint"
        if not torch.equal(where[name].get_tensor(name).to(tensor.dtype), tensor.detach().to("cpu")):
            return f"{name} differs from the checkpoint (e.g. a residual init: PiSSA, MiLoRA)"
    return None


def _size(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


class CPUAdapterSync(CPUWeightSync):
    """`CPUWeightSync` that sends the LoRA adapter only (and the base once where needed): see the module.

    ``sent`` records, per sync (the latest `SENT_RECORDS`), the tensors that crossed: ``{"adapter": (count, bytes), "base": (count, bytes) or
    None, "names": [...], "seconds": s}``."""

    def __init__(self, generation, directory: str | None = None):
        super().__init__(generation, directory)
        self.model = generation.model
        self.base_sent = False
        self.base_checked = False
        self.lora_id = 0
        self.request = None  # the colocated engine's current LoRARequest
        self.adapter_name = None  # the server's current adapter name
        self.run_id = uuid.uuid4().hex[
            :12
        ]  # the server's adapter names are this trainer's own (a server outlives runs)
        self.sent: list[dict] = []
        self._folders: list[str] = []  # the server's adapter folders still on disk (the last one it loaded)
        weakref.finalize(self, _remove_folders, self._folders)
        if generation.mode == "colocate":
            llm, original = generation.llm, generation.llm.generate

            def generate(*args, **kwargs):  # every request of the trainer's engine is served with the adapter
                if self.request is not None and kwargs.get("lora_request") is None:
                    kwargs["lora_request"] = self.request
                return original(*args, **kwargs)

            llm.generate = generate

    # -- the base, once --------------------------------------------------------------------------------------------
    def _base_to_send(self, holds_start_up_weights: bool = True):
        """The base tensors when vLLM must get them (the first sync only), else None."""
        if self.base_checked:
            return None
        self.base_checked = True
        base = base_tensors(self.model, self.generation._fix_param_name_to_vllm)
        reason = base_differs_from_checkpoint(base, self.model.name_or_path)
        if reason is None and not holds_start_up_weights:
            reason = "the server holds other weights than its start-up checkpoint"
        if reason is None:
            return None
        logger.info("vllm_sync='adapter': sending the base once (%s).", reason)
        return base

    def _record(self, adapter, base, start) -> None:
        self.sent.append({
            "adapter": (len(adapter), _size(adapter.values())),
            "base": None if base is None else (len(base), _size(t for _, t in base)),
            "names": sorted(adapter),
            "seconds": time.perf_counter() - start,
        })  # fmt: skip
        del self.sent[:-SENT_RECORDS]

    # -- colocate ----------------------------------------------------------------------------------------------------
    def __call__(self) -> None:
        if self.generation.mode != "colocate":
            return super().__call__()  # server: `_send_to_server` below, under the guard
        start = time.perf_counter()
        runner = self.generation.llm.llm_engine.model_executor.driver_worker.model_runner
        base = self._base_to_send()
        if base is not None:
            # vLLM's reload draws from the process's torch generator, which the colocated sampler draws from too: a
            # resumed run (which sends the base, where the uninterrupted one did not) must draw the same samples
            with torch.random.fork_rng(devices=[]):
                reload_weights(runner, base)
            self.base_sent = True
        adapter = adapter_tensors(self.model)
        self.request = add_adapter_in_memory(runner, self.lora_id + 1, adapter, adapter_config_dict(self.model))
        if self.lora_id:
            runner.lora_manager.remove_adapter(self.lora_id)
        self.lora_id += 1
        self.generation.llm.reset_prefix_cache()
        self.num_syncs += 1
        self._record(adapter, base, start)

    # -- server ------------------------------------------------------------------------------------------------------
    def _sync_server(self) -> None:
        # The other processes take part in no gather (a sharded base refuses the adapter sync), and must not merge
        if self.generation.accelerator.is_main_process:
            super()._sync_server()

    def _rpc(self, method: str, *args):
        client = self.generation.vllm_client
        response = client.session.post(
            f"{client.base_url}/collective_rpc", json={"method": method, "args": list(args)}
        )
        if response.status_code != 200:
            raise RuntimeError(
                f"The vLLM server at {client.base_url} could not run {method} ({response.status_code}: "
                f"{response.text[:500]}). Start it with `trl-rlvr-ext vllm-serve --model ... --lora_rank R` on this "
                "host (it loads the worker extension and enables /collective_rpc and LoRA)."
            )
        return response.json()

    def _send_to_server(self) -> None:
        from safetensors.torch import save_file

        start = time.perf_counter()
        client = self.generation.vllm_client
        base = None
        if not self.base_checked:
            results = self._rpc(BASE_STATE_METHOD)["results"]  # one {"start_up": bool} per worker
            pristine = all(result["start_up"] for result in results)
            base = self._base_to_send(holds_start_up_weights=pristine)
        if base is not None:
            self._reload_on_server(base)
            self.base_sent = True
        adapter = adapter_tensors(self.model)
        folder = tempfile.mkdtemp(prefix="trl_rlvr_ext_vllm_adapter_", dir=self.directory)
        save_file(adapter, os.path.join(folder, "adapter_model.safetensors"))
        with open(os.path.join(folder, "adapter_config.json"), "w") as f:
            json.dump(adapter_config_dict(self.model), f)
        name = f"{ADAPTER_NAME}_{self.run_id}_{self.num_syncs + 1}"
        response = client.session.post(
            f"{client.base_url}/v1/load_lora_adapter", json={"lora_name": name, "lora_path": folder}
        )
        if response.status_code != 200:
            raise RuntimeError(
                f"The vLLM server at {client.base_url} could not load the LoRA adapter ({response.status_code}: "
                f"{response.text[:500]}). With vllm_sync='adapter' start it with `trl-rlvr-ext vllm-serve --model ... "
                "--lora_rank R` (R >= the adapter's rank: LoRA on, runtime adapter loading on), or set "
                "vllm_sync='merged'."
            )
        previous, self.adapter_name = self.adapter_name, name
        client.model = name  # the client's requests name the adapter as their model
        if previous is not None:
            client.session.post(f"{client.base_url}/v1/unload_lora_adapter", json={"lora_name": previous})
        while len(self._folders) > 1:  # the server has read the previous folder: keep the current one only
            shutil.rmtree(self._folders.pop(0), ignore_errors=True)
        self._folders.append(folder)
        client.reset_prefix_cache()
        self._record(adapter, base, start)


def _remove_folders(folders: list[str]) -> None:
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)


def add_adapter_in_memory(model_runner, lora_id: int, tensors: dict, config: dict):
    """Add a LoRA adapter to a colocated vLLM model runner from tensors in memory, under ``lora_id``; returns the
    ``LoRARequest`` that serves it. This is vLLM's ``WorkerLoRAManager._load_adapter`` without the folder: the same
    ``PEFTHelper`` checks and ``LoRAModel.from_lora_tensors``."""
    from vllm.lora.lora_model import LoRAModel
    from vllm.lora.peft_helper import PEFTHelper
    from vllm.lora.request import LoRARequest

    manager = model_runner.lora_manager
    helper = PEFTHelper.from_dict({**config, "vllm_max_position_embeddings": manager.max_position_embeddings})
    helper.validate_legal(manager.lora_config)
    model = manager._adapter_manager.model
    mapper = getattr(model, "hf_to_vllm_mapper", None)
    lora = LoRAModel.from_lora_tensors(
        lora_id,
        tensors,
        helper,
        device="cpu",
        dtype=manager.lora_config.lora_dtype,
        model_vocab_size=manager.vocab_size,
        weights_mapper=None if mapper is None else mapper.get_rename_mapper(),
        skip_prefixes=getattr(model, "lora_skip_prefixes", None),
    )
    manager._adapter_manager.add_adapter(lora)
    # The path is never read: the adapter is in the manager under this id before any request names it
    return LoRARequest(f"{ADAPTER_NAME}_{lora_id}", lora_id, f"in-memory://{ADAPTER_NAME}/{lora_id}")


def colocated_lora_modules(generation) -> set[str]:
    """The module leaf names (checkpoint names) the colocated engine's LoRA wraps."""
    manager = generation.llm.llm_engine.model_executor.driver_worker.model_runner.lora_manager._adapter_manager
    names = set()
    for module in manager.supported_lora_modules:
        names.update(manager.packed_modules_mapping.get(module, [module]))
    return names


def install_adapter_sync(generation, args) -> CPUWeightSync:
    """`CPUAdapterSync` for this trainer's engine when vLLM's LoRA serves its adapter, else `CPUWeightSync` (the
    merged sync) after one log line saying why."""
    from accelerate.utils import is_peft_model

    if not is_peft_model(generation.model):
        raise ValueError(
            "vllm_sync='adapter' sends a LoRA adapter to vLLM, but the model has no PEFT adapter: pass "
            "peft_config=LoraConfig(...) to the trainer, or leave vllm_sync='merged'."
        )
    reason = adapter_refusal(generation.model, args)
    if reason is None and generation.mode == "colocate":
        runner = generation.llm.llm_engine.model_executor.driver_worker.model_runner
        if getattr(runner, "lora_manager", None) is None:
            reason = "the colocated engine was built without LoRA (enable_lora=False in vllm_engine_kwargs?)"
        else:
            reason = adapter_refusal(generation.model, args, colocated_lora_modules(generation))
    if reason is not None:
        logger.warning(ADAPTER_FALLBACK_LOG.format(reason=reason))
        return CPUWeightSync(generation)
    return CPUAdapterSync(generation)


def colocate_lora_engine_kwargs(args, model, peft_config) -> dict:
    """The ``vllm.LLM`` arguments that turn LoRA on in the colocated engine for ``vllm_sync="adapter"`` (empty when
    the adapter's config already refuses the adapter sync: `install_adapter_sync` then logs why and syncs merged)."""
    if getattr(args, "vllm_sync", "merged") != "adapter" or getattr(args, "vllm_mode", None) != "colocate":
        return {}
    from accelerate.utils import is_peft_model

    is_peft = isinstance(model, torch.nn.Module) and is_peft_model(model)
    config = next(iter(model.peft_config.values())) if is_peft else peft_config
    if config is None or config_refusal(config) is not None:
        return {}
    ranks = [config.r, *(getattr(config, "rank_pattern", None) or {}).values()]
    return {"enable_lora": True, "max_lora_rank": engine_lora_rank(max(ranks)), "max_loras": 1}
