"""`trl_rlvr_ext.grpo.vllm_state` without vLLM: per-prompt seeded requests (their seeds, their order, the state a
checkpoint keeps), and the dead-server path (a connection error becomes one payload that TRL broadcasts; every
process saves the checkpoint, then raises)."""

import hashlib
import threading
import types

import pytest
import requests

from trl_rlvr_ext.grpo.checkpoint_state import CheckpointStateMixin
from trl_rlvr_ext.grpo.vllm_state import (
    SERVER_STATE_FILE,
    VLLMServerDiedError,
    _ServerDied,
    install_server_guard,
    merge_outputs,
    request_seed,
)


def test_request_seed_by_hand():
    digest = hashlib.sha256(b"7:3:5").digest()
    assert request_seed(7, 3, 5) == int.from_bytes(digest[:8], "big") % (2**31 - 2**16)
    seeds = {request_seed(0, g, p) for g in range(50) for p in range(64)}
    assert len(seeds) == 50 * 64  # distinct per generation and prompt
    assert max(seeds) + 2**16 < 2**31  # room for the n completions' seed + j


def test_merge_outputs_keeps_prompt_order():
    one = {
        "prompt_ids": [[1]],
        "completion_ids": [[5], [6]],
        "logprobs": [[[-0.1]], [[-0.2]]],
        "logprob_token_ids": None,
    }
    two = {
        "prompt_ids": [[2]],
        "completion_ids": [[7], [8]],
        "logprobs": [[[-0.3]], [[-0.4]]],
        "logprob_token_ids": None,
    }
    merged = merge_outputs([one, two])
    assert merged["prompt_ids"] == [[1], [2]] and merged["completion_ids"] == [[5], [6], [7], [8]]
    assert merged["logprobs"] == [[[-0.1]], [[-0.2]], [[-0.3]], [[-0.4]]] and merged["logprob_token_ids"] is None


class FakeClient:
    base_url = "http://127.0.0.1:1"

    def __init__(self, fail=None):
        self.fail, self.calls, self.lock = fail, [], threading.Lock()

    def generate(self, prompts, features=None, n=1, generation_kwargs=None, **kwargs):
        if self.fail is not None:
            raise self.fail
        with self.lock:
            self.calls.append((prompts, dict(generation_kwargs or {}), n))
        seed = generation_kwargs["seed"]
        return {
            "prompt_ids": prompts,
            "completion_ids": [[seed + j] for j in range(n)],
            "logprobs": None,
            "logprob_token_ids": None,
        }


def trl_like_generate(client, prompts, num_generations):
    """What TRL's server-mode generate does with the client's output: take it, broadcast it (one process here),
    duplicate the prompts and slice this process's share."""
    output = client.generate(prompts=prompts[::num_generations], n=num_generations, generation_kwargs={"x": 1})
    prompt_ids = [ids for ids in output["prompt_ids"] for _ in range(num_generations)]
    return prompt_ids[0 : len(prompts)], output["completion_ids"][0 : len(prompts)], None, None


class FakeTrainer(CheckpointStateMixin):
    def __init__(self, client, tmp_path):
        accelerator = types.SimpleNamespace(is_main_process=True, process_index=0)
        generation = types.SimpleNamespace(mode="server", accelerator=accelerator, vllm_client=client)
        generation.generate = lambda prompts, images, num_generations: trl_like_generate(
            client, prompts, num_generations
        )
        self.vllm_generation = generation
        self.args = types.SimpleNamespace(output_dir=str(tmp_path), seed=7)
        self.state = types.SimpleNamespace(global_step=2)
        self.model, self.saved = object(), []

    def _save_checkpoint(self, model, trial):
        self.saved.append(self.state.global_step)


def test_each_prompt_is_its_own_seeded_request_and_the_index_is_checkpointed(tmp_path):
    client = FakeClient()
    trainer = FakeTrainer(client, tmp_path)
    guard = install_server_guard(trainer, types.SimpleNamespace())
    assert [s.file_name for s in trainer._checkpoint_states] == [SERVER_STATE_FILE]
    prompts = [[5]] * 2 + [[6]] * 2  # 2 prompts x 2 generations, as TRL duplicates them
    _, completions, _, _ = trainer.vllm_generation.generate(prompts, None, 2)
    # one request per prompt, the caller's generation kwargs kept, the seed of (run seed 7, generation 0, position)
    assert sorted(c[0] for c in client.calls) == [[[5]], [[6]]]
    assert all(c[1]["x"] == 1 and c[2] == 2 for c in client.calls)
    first, second = request_seed(7, 0, 0), request_seed(7, 0, 1)
    assert completions == [[first], [first + 1], [second], [second + 1]]  # in prompt order, whatever came back first
    assert guard.state_dict() == {"generations": 1}
    _, again, _, _ = trainer.vllm_generation.generate(prompts, None, 2)
    assert again[0] == [request_seed(7, 1, 0)]  # the next generation: the next seeds
    # a resumed run continues from the checkpoint's index
    guard.load_state_dict({"generations": 1}, "x")
    assert trainer.vllm_generation.generate(prompts, None, 2)[1] == again


def test_a_dead_server_saves_a_checkpoint_then_raises(tmp_path):
    trainer = FakeTrainer(FakeClient(fail=requests.exceptions.ConnectionError("Connection refused")), tmp_path)
    guard = install_server_guard(trainer, types.SimpleNamespace())
    with pytest.raises(VLLMServerDiedError) as raised:
        trainer.vllm_generation.generate([[5], [6]], None, 1)
    assert trainer.saved == [2]  # the checkpoint first
    assert guard.state_dict() == {"generations": 0}  # the failed generation is not counted: resume redoes it
    message = str(raised.value)
    assert message.startswith("Stopped at step 3: the vLLM server at http://127.0.0.1:1 stopped answering during ")
    assert "generation (ConnectionError: Connection refused)" in message
    assert f"{tmp_path}/checkpoint-2" in message and "--resume_from_checkpoint" in message


def test_other_errors_are_not_taken_for_a_dead_server(tmp_path):
    trainer = FakeTrainer(FakeClient(fail=ValueError("bad request")), tmp_path)
    install_server_guard(trainer, types.SimpleNamespace())
    with pytest.raises(ValueError, match="bad request"):
        trainer.vllm_generation.generate([[5]], None, 1)
    assert trainer.saved == []


def test_the_dead_payload_survives_slicing_and_the_guard_is_only_for_the_cpu_server(tmp_path):
    died = _ServerDied("gone")
    assert died[0:3] is died and died[5] is died
    colocate = FakeTrainer(FakeClient(), tmp_path)
    colocate.vllm_generation.mode = "colocate"
    assert install_server_guard(colocate, types.SimpleNamespace()) is None
    assert install_server_guard(FakeTrainer(FakeClient(), tmp_path), None) is None  # no CPU sync: TRL's own path
