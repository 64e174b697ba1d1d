"""Trainer-free curation code: per-prompt state, pass-rate weights and floors, samplers, (de)serialisation."""

import itertools
import json

import numpy as np
import pytest
from trl.trainer.utils import RepeatSampler

from trl_rlvr_ext.curation import CurationSampler, CurationState, pass_rate_weights


# ---------------------------------------------------------------------------------------------- state
def test_pass_rate_estimate_is_beta_posterior_mean_with_forgetting():
    state = CurationState(3, prior_alpha=1.0, prior_beta=3.0, decay=0.5)
    np.testing.assert_allclose(state.pass_rate(), [0.25, 0.25, 0.25])  # prior mean alpha / (alpha + beta)
    state.update_samples([0, 0, 0, 0, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0, 0, float("nan")])
    # prompt 0: S = 3, T = 4; prompt 1: the NaN (ungraded) sample is ignored: S = 0, T = 3
    np.testing.assert_allclose(state.pass_rate(), [(3 + 1) / (4 + 4), 1 / (3 + 4), 0.25])
    state.update_samples([0, 0], [0, 0])
    # decayed: S = 0.5 * 3 + 0 = 1.5, T = 0.5 * 4 + 2 = 4
    assert state.pass_rate([0])[0] == pytest.approx((1.5 + 1) / (4 + 4))
    assert state.seen().tolist() == [True, True, False]


def test_known_solved_respects_recheck_window():
    state = CurationState(4)
    state.update_greedy([0, 1, 2], [True, False, True], step=10)
    state.update_greedy([2], [True], step=14)
    assert state.known_solved(step=12, recheck_steps=5).tolist() == [True, False, True, False]
    assert state.known_solved(step=15, recheck_steps=5).tolist() == [False, False, True, False]  # 0 is due again
    assert not state.known_solved(step=10, recheck_steps=0).any()  # 0 disables the memory


def test_state_round_trips_through_json_and_rejects_another_dataset():
    state = CurationState(5, decay=0.8)
    state.update_samples([1, 1, 3], [1, 0, 1])
    state.update_greedy([4], [True], step=3)
    state.step, state.skipped_steps, state.prepass_done = 7, 2, True
    restored = CurationState(5)
    restored.load_state_dict(json.loads(json.dumps(state.state_dict())))
    assert restored == state
    with pytest.raises(ValueError, match="same training set"):
        CurationState(6).load_state_dict(state.state_dict())


@pytest.mark.parametrize("kwargs", [{"prior_alpha": 0}, {"decay": 0.0}, {"decay": 1.5}])
def test_state_rejects_bad_settings(kwargs):
    with pytest.raises(ValueError):
        CurationState(3, **kwargs)


# ---------------------------------------------------------------------------------------------- weights
def test_pass_rate_weights_hand_values_and_floor():
    p = np.array([0.0, 0.1, 0.5, 0.9, 1.0])
    np.testing.assert_allclose(pass_rate_weights(p, "mid", 0.05), [0.05, 0.36, 1.0, 0.36, 0.05])
    np.testing.assert_allclose(pass_rate_weights(p, "low", 0.05), [1.0, 0.9, 0.5, 0.1, 0.05])
    np.testing.assert_allclose(pass_rate_weights(p, "mid", 0.5), [0.5, 0.5, 1.0, 0.5, 0.5])
    with pytest.raises(ValueError, match="target"):
        pass_rate_weights(p, "high")
    with pytest.raises(ValueError, match="floor"):
        pass_rate_weights(p, "mid", 0.0)


def test_pass_rate_sampler_probabilities_and_no_prompt_starves():
    state = CurationState(4, prior_alpha=1e-3, prior_beta=1e-3, decay=1.0)
    # pass rates ~ 0, 0.5, 1 and unseen (prior mean 0.5)
    state.update_samples([0] * 8 + [1] * 8 + [2] * 8, [0] * 8 + [1, 0] * 4 + [1] * 8)
    sampler = CurationSampler(4, state, "pass_rate", mini_repeat_count=1, batch_size=1, floor=0.1, seed=0)
    w = pass_rate_weights(state.pass_rate(), "mid", 0.1)
    np.testing.assert_allclose(sampler.probabilities(), w / w.sum())
    np.testing.assert_allclose(w, [0.1, 1.0, 0.1, 1.0], atol=1e-3)
    # empirical frequencies of single draws follow the probabilities, and the floored prompts are drawn too
    counts = np.bincount([sampler.draw_chunk()[0] for _ in range(4000)], minlength=4) / 4000
    np.testing.assert_allclose(counts, sampler.probabilities(), atol=0.03)
    assert counts.min() > 0.02


# ---------------------------------------------------------------------------------------------- samplers
def chunks_of(indices, batch_size, mini, repeat):
    """Undo the repeat structure, checking it on the way: returns the list of chunks."""
    block = batch_size * mini * repeat
    assert len(indices) % block == 0
    chunks = []
    for start in range(0, len(indices), block):
        part = indices[start : start + block]
        one = part[: batch_size * mini]
        assert part == one * repeat  # the chunk is repeated `repeat` times
        prompts = one[::mini]
        assert one == [p for p in prompts for _ in range(mini)]  # each prompt `mini` times in a row
        assert len(set(prompts)) == batch_size  # distinct prompts within a chunk
        chunks.append(prompts)
    return chunks


@pytest.mark.parametrize("mode", ["self", "pass_rate"])
def test_batch_structure_and_length_match_repeat_sampler(mode):
    n, batch_size, mini, repeat = 11, 3, 4, 2
    sampler = CurationSampler(n, CurationState(n), mode, mini, batch_size, repeat, seed=1)
    stock = RepeatSampler(list(range(n)), mini, batch_size, repeat, shuffle=True, seed=1)
    assert len(sampler) == len(stock) == len(list(sampler))
    chunks = chunks_of(list(sampler), batch_size, mini, repeat)
    assert len(chunks) == n // batch_size


def test_self_sampler_without_solved_prompts_walks_every_prompt_once_per_pass():
    n, batch_size = 12, 4
    sampler = CurationSampler(n, CurationState(n), "self", 2, batch_size, 1, seed=0)
    first = chunks_of(list(sampler), batch_size, 2, 1)
    second = chunks_of(list(sampler), batch_size, 2, 1)
    assert sorted(itertools.chain(*first)) == list(range(n))
    assert sorted(itertools.chain(*second)) == list(range(n))
    assert first != second  # reshuffled
    unshuffled = CurationSampler(n, CurationState(n), "self", 2, batch_size, 1, shuffle=False)
    assert chunks_of(list(unshuffled), batch_size, 2, 1) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]


def test_self_sampler_skips_known_solved_until_recheck_and_fills_when_short():
    n = 10
    state = CurationState(n)
    state.update_greedy([0, 1, 2, 3, 4, 5], [True] * 6, step=0)
    sampler = CurationSampler(n, state, "self", 1, 2, 1, seed=0, recheck_steps=5)
    state.step = 4
    for _ in range(6):
        assert set(sampler.draw_chunk()) <= {6, 7, 8, 9}  # solved prompts are not drawn ...
    state.step = 5
    drawn = set(itertools.chain(*(sampler.draw_chunk() for _ in range(10))))
    assert drawn & {0, 1, 2, 3, 4, 5}  # ... until they are due for a re-check
    # fewer eligible prompts than a chunk: fill with the solved prompts checked longest ago
    state.update_greedy(list(range(n)), [True] * n, step=5)
    state.update_greedy([3], [True], step=1)
    state.update_greedy([7], [False], step=6)
    state.step = 6
    chunk = CurationSampler(n, state, "self", 1, 3, 1, seed=0, recheck_steps=100).draw_chunk()
    assert chunk[0] == 7 and chunk[1] == 3 and len(set(chunk)) == 3


def test_identical_streams_for_identical_state_and_seed():
    def stream(seed):
        state = CurationState(9)
        sampler = CurationSampler(9, state, "pass_rate", 2, 3, 1, seed=seed)
        out = []
        for i, index in enumerate(sampler):
            out.append(index)
            if i % 6 == 5:  # the trainer updates the state between chunks
                state.update_samples([index] * 4, [1, 1, 1, 0])
        return out

    assert stream(3) == stream(3)
    assert stream(3) != stream(4)


@pytest.mark.parametrize("mode", ["self", "pass_rate"])
def test_sampler_resume_continues_the_uninterrupted_stream(mode):
    """Save after some chunks (inside a pass and at a pass's end), rebuild from JSON, resume: the same chunks follow.

    The state is updated between chunk draws, as the trainer does, so the stream depends on it."""
    n, batch_size, mini = 8, 2, 2

    def run(resume_at=None):
        state = CurationState(n)
        sampler = CurationSampler(n, state, mode, mini, batch_size, 1, seed=5, recheck_steps=2)
        chunks, epoch = [], 0
        while len(chunks) < 10:
            sampler.set_epoch(epoch)
            iterator = iter(sampler)
            while True:
                block = list(itertools.islice(iterator, batch_size * mini))
                if not block:
                    break
                chunk = block[::mini]
                chunks.append(chunk)
                state.step = len(chunks)
                if mode == "self":
                    state.update_greedy(chunk[:1], [True], len(chunks))
                state.update_samples([chunk[0]] * 2, [1, 0])
                if resume_at is not None and len(chunks) == resume_at:
                    saved = json.loads(json.dumps({"state": state.state_dict(), "sampler": sampler.state_dict()}))
                    state = CurationState(n)
                    state.load_state_dict(saved["state"])
                    sampler = CurationSampler(n, state, mode, mini, batch_size, 1, seed=5, recheck_steps=2)
                    sampler.load_state_dict(saved["sampler"])
                    resume_at = None
                    # the trainer re-enters the same pass and skips the chunks already trained on
                    sampler.set_epoch(epoch)
                    iterator = iter(sampler)
                    consumed = (len(chunks) - 1) % (n // batch_size) + 1
                    list(itertools.islice(iterator, consumed * batch_size * mini))
                    if consumed == n // batch_size:
                        break
            epoch += 1
        return chunks[:10]

    reference = run()
    for resume_at in (2, 4, 5):
        assert run(resume_at) == reference, (mode, resume_at)


def test_sampler_rejects_a_state_saved_for_another_setup():
    state = CurationState(8)
    saved = CurationSampler(8, state, "self", 2, 2, 1).state_dict()
    with pytest.raises(ValueError, match="batch_size"):
        CurationSampler(8, state, "self", 2, 4, 1).load_state_dict(saved)
    with pytest.raises(ValueError, match="mode"):
        CurationSampler(8, state, "pass_rate", 2, 2, 1).load_state_dict(saved)
    with pytest.raises(ValueError, match="distinct prompts"):
        CurationSampler(3, CurationState(3), "self", 2, 4, 1)
