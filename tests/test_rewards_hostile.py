"""The hostile-completion corpus (tests/fixtures/hostile_completions.py) through every reward this package ships:
nothing crashes, nothing hangs, every score is a valid reward.

Each reward runs in a subprocess with a wall-clock limit, so a hang fails the test instead of stalling it (a hung
C-level computation would hold the GIL of the test process).
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from fixtures.hostile_completions import GOLD, MEGABYTE, hostile_completions


ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ["toy_accuracy", "math_accuracy"]  # the reward functions this package defines (the rest are TRL's)

_SCRIPT = textwrap.dedent(
    """
    import json, sys, threading
    sys.path.insert(0, {tests!r})
    from fixtures.hostile_completions import GOLD, hostile_completions
    from trl_rlvr_ext.rewards import get_reward_func
    from trl_rlvr_ext.rewards.guard import guard_reward_func

    reward = guard_reward_func(get_reward_func(sys.argv[1]), timeout=2.0)
    names, texts = zip(*hostile_completions())
    out = {{}}
    def run():  # off the main thread, where math-verify's own timeouts do not work
        out["standard"] = reward(prompts=[""] * len(texts), completions=list(texts), answer=[GOLD] * len(texts))
        conversational = [[{{"role": "assistant", "content": t}}] for t in texts]
        out["conversational"] = reward(prompts=[""] * len(texts), completions=conversational, answer=[GOLD] * len(texts))
    worker = threading.Thread(target=run)
    worker.start()
    worker.join()
    print(json.dumps({{"names": names, **out}}))
    """
).format(tests=str(ROOT / "tests"))


def test_corpus_has_every_kind_of_hostile_completion():
    corpus = dict(hostile_completions())
    assert corpus["empty"] == ""
    assert len(corpus["one_megabyte_of_text"]) == MEGABYTE
    assert corpus["deeply_nested_frac"].count("\\frac{") == 2000
    assert corpus["unclosed_boxed"].count("{") > corpus["unclosed_boxed"].count("}")
    assert any(not ch.isascii() and ch.isdigit() for ch in corpus["unicode_digits"])
    assert "9^{9^{9^{9^{9}}}}" in corpus["power_tower"]
    assert corpus["answer_repeated_1000_times"].count(GOLD) == 1000
    assert any(ord(ch) < 32 for ch in corpus["control_characters"])


@pytest.mark.parametrize(
    "name", [n if n != "math_accuracy" else pytest.param(n, marks=pytest.mark.slow) for n in SHIPPED]
)
def test_shipped_rewards_survive_the_hostile_corpus(name):
    if name == "math_accuracy":
        pytest.importorskip("math_verify")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    try:
        result = subprocess.run(
            [sys.executable, "-c", _SCRIPT, name], capture_output=True, text=True, env=env, timeout=300, check=False
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{name} hung on the hostile corpus")
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    for variant in ("standard", "conversational"):
        scores = dict(zip(out["names"], out[variant], strict=True))
        assert all(score in (0.0, 1.0) for score in scores.values()), scores
        if name == "toy_accuracy":  # strict: only one marked answer made of ASCII digits counts
            assert set(scores.values()) == {0.0}
        else:  # the verifier's reading of the odd but honest ones
            assert scores["answer_repeated_1000_times"] == 1.0
            assert scores["power_tower"] == scores["factorial_tower"] == scores["deeply_nested_frac"] == 0.0
