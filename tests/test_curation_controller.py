"""Exact tests of the trainer-free curation controller and greedy strategies (no model, no trainer)."""

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from trl_rlvr_ext.curation.controller import (
    CurationController,
    resolve_reward_index,
    select_rows,
    sequence_scale,
    window_row_counts,
)
from trl_rlvr_ext.curation.greedy import FusedGreedy, GreedyRows, SeparateGreedy, grade_sharded


def controller(mode="self", ids=("a", "b", "c", "d"), **kwargs):
    ctl = CurationController(mode, **kwargs)
    ctl.setup(list(ids), "id")
    return ctl


class FakeHost:
    """A GreedyHost for process ``rank`` of ``world``. Gather number n returns, in rank order, this rank's items and
    ``others[n][rank]`` for the other ranks, as accelerate's gather_object does."""

    def __init__(self, rank=0, world=1, solved=(), others=()):
        self.process_index, self.num_processes = rank, world
        self.solved = set(solved)
        self.others = list(others)  # one {rank: items} per gather call
        self.decoded, self.graded = [], []

    def gather(self, items):
        others = self.others.pop(0) if self.others else {}
        out = []
        for rank in range(self.num_processes):
            out += list(items) if rank == self.process_index else list(others.get(rank, []))
        return out

    def decode_and_grade(self, examples):
        self.decoded.append([e["id"] for e in examples])
        return [e["id"] in self.solved for e in examples]

    def grade(self, examples, completion_ids):
        self.graded.append(([e["id"] for e in examples], completion_ids))
        return [c == [1] for c in completion_ids]


# ---------------------------------------------------------------------------------------------- set-up
def test_reward_index_is_the_only_function_or_the_named_one():
    assert resolve_reward_index("self", ["acc"], None) == 0
    assert resolve_reward_index("self", ["fmt", "acc"], "acc") == 1
    with pytest.raises(ValueError, match="set curation_reward_func"):
        resolve_reward_index("self", ["fmt", "acc"], None)
    with pytest.raises(ValueError, match=r"'nope' is not one of the reward functions \['fmt', 'acc'\]"):
        resolve_reward_index("pass_rate", ["fmt", "acc"], "nope")


def test_setup_maps_ids_to_rows_and_refuses_duplicates():
    ctl = controller(ids=[10, 30, 20])
    assert [ctl.row({"id": i}) for i in (20, 10, 30)] == [2, 0, 1]
    assert ctl.state.num_prompts == 3
    with pytest.raises(KeyError, match="remove_unused_columns=False"):
        ctl.row({"id": 99})
    with pytest.raises(ValueError, match="it has 2 duplicates"):
        CurationController("self").setup([1, 1, 2, 2], "id")
    with pytest.raises(ValueError, match="not supported"):
        CurationController("none")


def test_from_config_reads_the_curation_fields():
    class Args:
        curation, curation_correct_threshold, curation_seed = "pass_rate", 0.5, 7
        curation_self_recheck_steps, curation_pass_rate_target, curation_pass_rate_floor = 3, "low", 0.2
        curation_pass_rate_prior_alpha, curation_pass_rate_prior_beta, curation_pass_rate_decay = 2.0, 3.0, 0.9

    ctl = CurationController.from_config(Args)
    assert (ctl.mode, ctl.correct_threshold) == ("pass_rate", 0.5)
    assert ctl.sampler_settings == {"seed": 7, "recheck_steps": 3, "target": "low", "floor": 0.2}
    ctl.setup([0, 1], "id")
    assert (ctl.state.prior_alpha, ctl.state.prior_beta, ctl.state.decay) == (2.0, 3.0, 0.9)


def test_make_sampler_checks_the_dataset_size():
    ctl = controller()
    sampler = ctl.make_sampler(4, mini_repeat_count=2, batch_size=2, repeat_count=1)
    assert ctl.sampler is sampler and len(sampler) == 8
    with pytest.raises(ValueError, match="has 5 rows but curation was set up for 4"):
        ctl.make_sampler(5, mini_repeat_count=2, batch_size=2, repeat_count=1)


# ---------------------------------------------------------------------------------------------- one batch
def test_self_batch_records_greedy_and_rewards_and_keeps_unsolved_prompts():
    ctl = controller(correct_threshold=0.5)
    batch = ctl.begin_batch([0, 0, 1, 1, 2, 2], step=3)
    assert ctl.state.step == 3 and batch.rows.tolist() == [0, 0, 1, 1, 2, 2]
    ctl.record_greedy({0: False, 1: True, 2: False})
    keep = ctl.record_rewards([1.0, 0.4, 0.5, 0.0, float("nan"), 0.0])
    assert keep.tolist() == [True, True, False, False, True, True]
    np.testing.assert_array_equal(batch.sample_correct, [1.0, 0.0, 1.0, 0.0, np.nan, 0.0])
    assert ctl.state.successes.tolist() == [1.0, 1.0, 0.0, 0.0]
    assert ctl.state.trials.tolist() == [2.0, 2.0, 1.0, 0.0]  # the NaN reward is not a trial
    assert ctl.state.greedy_correct.tolist() == [0, 1, 0, -1] and ctl.state.greedy_step.tolist() == [3, 3, 3, -1]
    assert ctl.close_batch() is batch and ctl.batch is None
    # pass rates (1+1)/(2+2), (1+1)/(2+2), (0+1)/(1+2) over the seen prompts; 2 of 3 prompts kept
    assert ctl.batch_metrics(batch) == {
        "curation/batch_pass_rate": 0.4,
        "curation/mean_pass_rate": (0.5 + 0.5 + 1 / 3) / 3,
        "curation/greedy_solved_frac": 1 / 3,
        "curation/kept_prompts": 2.0,
        "curation/skipped_steps": 0.0,
    }


def test_pass_rate_batch_keeps_everything_and_counts_prompts():
    ctl = controller("pass_rate")
    batch = ctl.begin_batch([3, 3, 1, 1], step=0)
    assert ctl.record_rewards([1.0, 1.0, 0.0, 1.0]) is None
    ctl.close_batch()
    assert ctl.state.successes.tolist() == [0.0, 1.0, 0.0, 2.0]
    assert ctl.batch_metrics(batch) == {
        "curation/batch_pass_rate": 0.75,
        "curation/mean_pass_rate": (2 / 4 + 3 / 4) / 2,
        "curation/kept_prompts": 2.0,
    }


def test_batch_protocol_errors_are_clear():
    ctl = controller()
    ctl.begin_batch([0, 0], step=0)
    with pytest.raises(RuntimeError, match="was not closed"):
        ctl.begin_batch([1, 1], step=0)
    with pytest.raises(RuntimeError, match="Gathered 3 rewards for 2 curated rows"):
        ctl.record_rewards([1.0, 1.0, 1.0])
    with pytest.raises(RuntimeError, match="needs the batch's greedy results first"):
        ctl.record_rewards([1.0, 1.0])


# ---------------------------------------------------------------------------------------------- windows and losses
def test_empty_window_is_skipped_and_counted():
    ctl = controller()
    ctl.record_micro_batch(0)
    ctl.record_micro_batch(2)
    assert ctl.end_window() is False and ctl.window_kept is False
    ctl.record_micro_batch(0)
    assert ctl.end_window() is True and ctl.state.skipped_steps == 1
    assert ctl.window_metrics(True) == {"curation/skipped_steps": 1.0, "curation/step_skipped": 1.0}
    assert ctl.end_window() is True and ctl.state.skipped_steps == 2  # a window with no micro-batch kept nothing


def test_window_row_counts_and_sequence_scale():
    assert window_row_counts([4, 0, 2, 4], 2) == [4, 4, 6, 6]
    assert window_row_counts([1, 2, 3], 1) == [1, 2, 3]
    assert window_row_counts([1, 2, 3, 4], 4) == [10] * 4
    # rows·GA·P / K: 2 rows, GA 2, 2 processes, 10 kept in the window
    assert sequence_scale(2, 2, 2, 10) == 0.8
    assert sequence_scale(4, 2, 1, 8) == 1.0  # nothing dropped: exactly 1
    with pytest.raises(RuntimeError, match="kept-row count of the optimizer window"):
        sequence_scale(2, 2, 1, None)


def test_select_rows_takes_rows_and_pads_with_loss_free_copies():
    inputs = {
        "completion_mask": torch.tensor([[1, 1], [1, 0], [1, 1]]),
        "advantages": torch.tensor([0.5, -1.0, 2.0]),
        "ids": ["x", "y", "z"],
        "num_items_in_batch": torch.tensor(5),
    }
    out = select_rows(inputs, torch.tensor([2, 0]), num_padding=2)
    assert out["completion_mask"].tolist() == [[1, 1], [1, 1], [0, 0], [0, 0]]
    assert out["advantages"].tolist() == [2.0, 0.5, 0.0, 0.0]
    assert out["ids"] == ["z", "x", "z", "z"]
    assert out["num_items_in_batch"] is inputs["num_items_in_batch"]
    assert inputs["advantages"].tolist() == [0.5, -1.0, 2.0]  # the input is untouched
    empty = select_rows(inputs, torch.tensor([], dtype=torch.long), num_padding=1)
    assert empty["ids"] == ["x"] and empty["completion_mask"].tolist() == [[0, 0]]


# ---------------------------------------------------------------------------------------------- checkpoints
def test_state_dict_round_trips_through_json_and_resumes_the_sampler():
    ctl = controller()
    sampler = ctl.make_sampler(4, mini_repeat_count=1, batch_size=2, repeat_count=1)
    ctl.begin_batch([0, 1], step=1)
    ctl.record_greedy({0: True, 1: False})
    ctl.record_rewards([1.0, 0.0])
    ctl.close_batch()
    ctl.record_micro_batch(0)
    ctl.end_window()
    sampler.draw_chunk()
    payload = json.loads(json.dumps(ctl.state_dict()))
    assert payload["version"] == 1 and payload["mode"] == "self" and payload["ids"] == ["a", "b", "c", "d"]

    resumed = controller()
    resumed.load_state_dict(payload)  # before the sampler exists: applied by make_sampler
    assert resumed.state == ctl.state and resumed.state.skipped_steps == 1
    again = resumed.make_sampler(4, mini_repeat_count=1, batch_size=2, repeat_count=1)
    assert again.state_dict() == sampler.state_dict()
    assert again.draw_chunk() == sampler.draw_chunk()

    with pytest.raises(ValueError, match=r"ckpt/x.json was saved with curation='self', this run uses 'pass_rate'"):
        controller("pass_rate").load_state_dict(payload, source="ckpt/x.json")
    with pytest.raises(ValueError, match="prompt ids differ"):
        controller(ids="abce").load_state_dict(payload)


# ---------------------------------------------------------------------------------------------- greedy strategies
def test_grade_sharded_gives_each_rank_an_equal_contiguous_share():
    examples = {r: {"id": r} for r in (7, 8, 9)}
    # rank 1 of 2: rows [9] padded to the share of 2 with the last row; rank 0 contributes (7, True), (8, False)
    host = FakeHost(rank=1, world=2, solved={9}, others=[{0: [(7, True), (8, False)]}])
    assert grade_sharded(host, [7, 8, 9], examples) == {7: True, 8: False, 9: True}
    assert host.decoded == [[9, 9]]
    host = FakeHost(rank=0, world=2, solved={8}, others=[{1: [(9, False)]}])
    assert grade_sharded(host, [7, 8, 9], examples) == {7: False, 8: True, 9: False}
    assert host.decoded == [[7, 8]]


def test_separate_greedy_checks_the_distinct_prompts_of_all_ranks_before_sampling():
    ctl = controller()
    batch = ctl.begin_batch([0, 0, 1, 1, 2, 2], step=0)
    # this rank holds rows 0, 0, 1; rank 1 holds 1, 2, 2 (a group straddles the ranks)
    inputs = [{"id": "a"}, {"id": "a"}, {"id": "b"}]
    gathers = [{1: [(1, {"id": "b"}), (2, {"id": "c"})]}, {1: [(2, True)]}]  # rank 1's distinct rows, its result
    host = FakeHost(rank=0, world=2, solved={"b"}, others=gathers)
    SeparateGreedy().begin(host, batch, [0, 0, 1], inputs)
    assert host.decoded == [["a", "b"]]  # rows 0, 1, 2 shared 2 + 1 between the ranks
    assert batch.greedy == {0: False, 1: True, 2: True} and SeparateGreedy().results(host, batch) is batch.greedy
    assert ctl.take_fused_request() is None


def test_fused_greedy_request_is_taken_once_split_off_and_graded_first_rank_wins():
    ctl = controller()
    batch = ctl.begin_batch([0, 0, 2, 2], step=0)
    host = FakeHost(rank=1, world=2, others=[{0: [(2, False), (3, False)]}])
    strategy = FusedGreedy()
    strategy.begin(host, batch, [2, 2, 0, 0], [{"id": "c"}, {"id": "c"}, {"id": "a"}, {"id": "a"}])
    with pytest.raises(RuntimeError, match="fused greedy decode did not run"):
        strategy.results(host, batch)
    request = ctl.take_fused_request()
    assert request.rows == [2, 0] and [e["id"] for e in request.examples] == ["c", "a"]
    assert ctl.take_fused_request() is None  # only the first sampling call carries the greedy rows
    sampled, logprobs = FusedGreedy.split(request, [[5], [6], [1], [4]], [[0.1], [0.2], [0.3], [0.4]], 2)
    assert sampled == [[5], [6]] and logprobs == [[0.1], [0.2]]
    assert FusedGreedy.split(request, [[5], [6], [1], [4]], None, 2)[1] is None
    # this rank grades c right, a wrong; rank 0 (first in the gather) already answered row 2: its answer wins
    assert strategy.results(host, batch) == {2: False, 3: False, 0: False}
    assert host.graded == [(["c", "a"], [[1], [4]])]


def test_fused_sampling_call_appends_greedy_rows_to_the_logits_processors():
    class Model:
        def generate(self, *args, logits_processor=None, **kwargs):
            return list(logits_processor or [])

    model = Model()
    sentinel = object()
    with FusedGreedy.extend_sampling_call(model, 2, 1):
        processors = model.generate(logits_processor=[sentinel])
    assert processors[0] is sentinel and isinstance(processors[1], GreedyRows)
    assert processors[1].rows.tolist() == [False, False, True]
    assert "generate" not in vars(model)  # the patch is gone
    scores = torch.tensor([[0.5, 2.0], [3.0, 0.0], [0.0, 0.5]])
    assert processors[1](None, scores).tolist() == [[0.5, 2.0], [3.0, 0.0], [float("-inf"), 0.0]]


def test_prepass_chunks_and_records():
    ctl = controller(ids=range(5))
    assert ctl.needs_prepass(True) and not ctl.needs_prepass(False)
    assert ctl.prepass_chunks(2) == [[0, 1], [2, 3], [4]]
    ctl.record_prepass({0: True, 1: False, 2: True, 3: True, 4: False}, step=0)
    assert ctl.finish_prepass() == {"curation/prepass_solved_frac": 0.6}
    assert not ctl.needs_prepass(True)
    assert not controller("pass_rate").needs_prepass(True)


def test_the_controller_imports_no_trainer_library():
    code = (
        "import sys, trl_rlvr_ext.curation.controller\n"
        "print(sorted(m for m in ('trl', 'transformers', 'accelerate') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
