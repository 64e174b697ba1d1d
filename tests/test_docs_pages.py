"""Every code block of the docs is run as printed, or carries a mark that the page also states in words.

The tutorials and method pages have their own tests (``test_docs_<topic>.py``) with assertions on what their blocks
produce; this module runs the other pages, checks that no page or block is left out, and tests the harness itself.
"""

import re
from pathlib import Path

import pytest
from docs_helpers import (  # noqa: F401 -- fixtures
    DOCS,
    ROOT,
    RUN_LANGUAGES,
    code_blocks,
    docs_env,
    docs_toy_cache,
    run_docs_page,
    run_markdown,
)


# Every page under docs/, and the test that runs its blocks. A new page fails `test_every_page_is_run` until it is
# added here.
PAGE_TESTS = {
    "index.md": "no code blocks",
    "installation.md": "not run here: installs packages (its commands are checked by the packaging tests)",
    "quickstart.md": "test_docs_pages.py::test_quickstart_runs",
    "use_in_your_project.md": "test_docs_pages.py::test_use_in_your_project_page_runs",
    "toy.md": "test_docs_pages.py::test_toy_page_runs",
    "scaling.md": "test_docs_pages.py::test_scaling_page_blocks_are_all_marked",
    "vllm_cpu.md": "test_docs_pages.py::test_vllm_cpu_page_blocks_are_all_marked",
    "methods/nsr.md": "test_docs_nsr.py::test_nsr_method_page_config_example",
    "methods/acpo.md": "test_docs_acpo.py::test_acpo_method_page_config_example",
    "methods/delta.md": "test_docs_delta.py::test_delta_method_page_config_example",
    "methods/rsi.md": "test_docs_rsi.py::test_rsi_method_page_config_example",
    "methods/relex.md": "test_docs_relex.py::test_relex_method_page_config_example",
    "methods/popo.md": "test_docs_popo.py::test_popo_method_page_config_example",
    "methods/poise.md": "test_docs_poise.py::test_poise_method_page_config_example",
    "methods/is_dpo.md": "test_docs_is_dpo.py::test_method_page_runs",
    "methods/lora_init.md": "test_docs_lora_init.py::test_method_page_examples_run",
    "methods/self_curation.md": "test_docs_curation.py::test_self_method_page_config_example",
    "methods/pass_rate_curation.md": "test_docs_curation.py::test_pass_rate_method_page_config_example",
    "tutorials/grpo_nsr.md": "test_docs_nsr.py::test_grpo_nsr_tutorial_runs",
    "tutorials/is_dpo.md": "test_docs_is_dpo.py::test_tutorial_runs_end_to_end",
    "tutorials/lora_init_grpo.md": "test_docs_lora_init.py::test_tutorial_runs_end_to_end",
    "tutorials/pass_at_k.md": "test_docs_curation.py::test_pass_at_k_tutorial_runs",
    "tutorials/offline_curation.md": "test_docs_curation.py::test_offline_curation_tutorial_runs",
    "reference/api.md": "no code blocks",
    "reference/composition.md": "test_composition.py::test_composition_page_is_the_render",
    "tutorials/own_method.md": "test_composition.py::test_own_method_tutorial_runs",
    "evidence/index.md": "no code blocks",
    "evidence/self.md": "no code blocks",
    "evidence/nsr.md": "no code blocks",
    "evidence/is_dpo.md": "no code blocks",
    "evidence/lora_init.md": "no code blocks",
    "evidence/pretrained.md": "no code blocks",
    "evidence/rule.md": "no code blocks",
    "evidence/nsr/results.md": "no code blocks",
    "evidence/nsr/acpo.md": "no code blocks",
    "evidence/nsr/heldout.md": "no code blocks",
    "evidence/nsr/heldout_compact.md": "no code blocks",
    "evidence/self/results.md": "no code blocks",
    "evidence/self/bases.md": "no code blocks",
    "evidence/is_dpo/dense.md": "no code blocks",
    "evidence/is_dpo/validated.md": "no code blocks",
    "evidence/screening.md": "test_screen_tasks.py::test_render_only_reproduces_the_committed_page",
    "evidence/real_model_demo.md": "test_demo_pretrained.py::test_render_reproduces_the_committed_page",
    "tutorials/real_model.md": "test_docs_real_model.py::test_real_model_tutorial_runs",
    "reference/metrics.md": "no code blocks",
    "reference/fidelity.md": "no code blocks",
    "reference/reliability.md": "test_rewards_docs.py::test_reliability_page_runs",
    "methods/dynamic_sampling.md": "test_docs_dynamic_sampling.py::test_dynamic_sampling_method_page_config_example",
    "tutorials/dynamic_sampling.md": "test_docs_dynamic_sampling.py::test_dynamic_sampling_tutorial_runs_as_printed",
    "tutorials/reasoning_gym.md": "test_docs_reasoning_gym.py::test_reasoning_gym_page_runs",
}
# Pages registered above that arrive with other branches: absent until merged, checked once they are there.
_ARRIVING = {
    "reference/reliability.md",
    "methods/dynamic_sampling.md",
    "tutorials/dynamic_sampling.md",
    "tutorials/reasoning_gym.md",
}
_VISIBLE_NOTE = re.compile(r'^!!! \w+ "(?P<title>[^"]+)"\n(?P<body>(?:(?: {4}.*)?\n)*)\Z', re.MULTILINE)


def _pages():
    return sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))


def _present(pages):
    return [page for page in pages if (DOCS / page).is_file() or page not in _ARRIVING]


def test_every_page_is_run():
    assert _pages() == sorted(_present(PAGE_TESTS)), "add the new page to PAGE_TESTS, with the test that runs it"
    for page, where in PAGE_TESTS.items():
        if not (DOCS / page).is_file():
            continue
        blocks = [b for b in code_blocks(DOCS / page) if b.language in RUN_LANGUAGES]
        if where == "no code blocks":
            assert not blocks, f"{page} has code blocks now: run them in a test"
        elif "::" in where:
            module, name = where.split("::")
            assert f"def {name}(" in (Path(__file__).parent / module).read_text(), where


# The fidelity table: one row per method this package ships, and the method page that describes it (None: no page).
FIDELITY_ROWS = {
    "nsr": "methods/nsr.md",
    "acpo": "methods/acpo.md",
    "delta": "methods/delta.md",
    "rsi": "methods/rsi.md",
    "popo": "methods/popo.md",
    "poise": "methods/poise.md",
    "relex": "methods/relex.md",
    "is-daa": "methods/is_dpo.md",
    "rlpo": "methods/lora_init.md",
    "rlmo": "methods/lora_init.md",
    "pissa": "methods/lora_init.md",
    "milora": "methods/lora_init.md",
    "self": "methods/self_curation.md",
    "pass-rate": "methods/pass_rate_curation.md",
    "dynamic-sampling": "methods/dynamic_sampling.md",
    "pass-at-k": None,
}


def test_fidelity_table_has_one_row_per_method_and_every_method_page_links_to_it():
    text = (DOCS / "reference" / "fidelity.md").read_text()
    rows = [line for line in text.splitlines() if line.startswith("| <span id=")]
    assert len(rows) == len([line for line in text.splitlines() if line.startswith("|")]) - 2  # header, rule
    anchors = [re.match(r'\| <span id="([^"]+)"></span>', row)[1] for row in rows]
    assert anchors == list(FIDELITY_ROWS), "one row per method, in this order"
    for anchor, row in zip(anchors, rows):
        cells = row.strip("|").split(" | ")
        assert len(cells) == 4 and all(cell.strip() for cell in cells), f"{anchor}: four filled columns"
        page = FIDELITY_ROWS[anchor]
        if page is not None:
            assert f"](../{page})" in cells[0], f"the {anchor} row links its method page"
            assert f"../reference/fidelity.md#{anchor}" in (DOCS / page).read_text(), f"{page} links its row"
    method_pages = sorted(str(p.relative_to(DOCS)) for p in (DOCS / "methods").glob("*.md"))
    assert method_pages == sorted({p for p in FIDELITY_ROWS.values() if p}), "a new method page needs its row"


@pytest.mark.parametrize("page", [p for p in _present(PAGE_TESTS) if p != "installation.md"])
def test_marked_blocks_say_so_in_words(page):
    """A block the tests do not run as is (skip), or run from a clone (clone), or on a CPU only as a config (gpu),
    has an admonition right above its mark, so the reader sees what it needs."""
    for block in code_blocks(DOCS / page):
        if block.mark is None:
            continue
        note = _VISIBLE_NOTE.search(block.preceding_text.rstrip("\n") + "\n\n")
        assert note, f"{block.where}: marked '{block.mark}' without an admonition right above the mark"
        title = note["title"].lower()
        expected = {"skip": ("gpu", "hub", "minutes", "your", "vllm"), "clone": ("clone",), "gpu": ("gpu",)}[
            block.mark
        ]
        assert any(word in title for word in expected), f"{block.where}: the note {note['title']!r} does not say why"
        if block.mark == "skip":
            assert block.reason, f"{block.where}: say why in the mark: <!-- docs-test: skip (why) -->"


@pytest.mark.slow
@pytest.mark.usefixtures("docs_env")
def test_quickstart_runs(tmp_path):
    namespace = run_docs_page("quickstart.md", tmp_path)
    assert namespace["trainer"].state.global_step == 20  # the offline script, as printed
    assert namespace["args"].clip_recovery == "nsr"
    assert (tmp_path / "outputs" / "demo" / "summary.json").is_file()  # trl-rlvr-ext demo --quick
    assert (tmp_path / "outputs" / "toy_nsr" / "model.safetensors").is_file()  # the toy recipe


@pytest.mark.usefixtures("docs_env")
def test_use_in_your_project_page_runs(tmp_path):
    """The adoption page as printed: the script, the subclassed config, the TrlParser script and the CLI with a YAML
    (each keeps this package's option), and the errors it prints are the ones the trainer raises."""
    namespace = run_docs_page("use_in_your_project.md", tmp_path)
    assert namespace["trainer"].state.global_step == 2 and namespace["trainer"].args.clip_recovery == "nsr"
    assert namespace["config"].clip_recovery == "nsr" and namespace["config"].system_prompt == "Think first."
    assert type(namespace["training_args"]).__name__ == "RLVRGRPOConfig"
    assert namespace["training_args"].clip_recovery == "nsr"
    assert (tmp_path / "outputs" / "toy_recipe" / "model.safetensors").is_file()
    page = (DOCS / "use_in_your_project.md").read_text()
    # the quoted errors start as the trainer's messages do (tests/test_drop_in.py checks the messages themselves)
    assert "my_project.configs.GRPOConfig, a subclass of trl.GRPOConfig. Make my_project.configs.GRPOConfig" in page
    assert "so the run would train stock TRL. Parse the config as a trl_rlvr_ext.RLVRGRPOConfig" in page


@pytest.mark.usefixtures("docs_env")
def test_toy_page_runs(tmp_path):
    namespace = run_docs_page("toy.md", tmp_path)
    # the proportions the page states, from the page's own block (the task is pure Python: the same everywhere)
    assert {k: round(v / 500, 2) for k, v in namespace["carries"].items()} == {0: 0.22, 1: 0.41, 2: 0.32, 3: 0.04}
    assert {"greedy_accuracy", "pass@1", "pass@1_by_num_carries"} <= set(namespace["result"])


def test_scaling_page_blocks_are_all_marked():
    blocks = [b for b in code_blocks(DOCS / "scaling.md") if b.language in RUN_LANGUAGES]
    assert blocks and all(b.mark == "skip" for b in blocks)  # multi-GPU launches only


def test_vllm_cpu_page_blocks_are_all_marked():
    # They need the vLLM venv; tests/test_vllm_cpu.py runs the same commands and the recipe
    blocks = [b for b in code_blocks(DOCS / "vllm_cpu.md") if b.language in RUN_LANGUAGES]
    assert blocks and all(b.mark == "skip" for b in blocks)


# ---------------------------------------------------------------- the harness itself
_SAMPLE = """# A page

```python
import os

value = 41
open("made_by_python.txt", "w").write(str(value))
```

```text
printed output, never run
```

```bash
test -f made_by_python.txt        # same directory as the python block
echo $((41 + 1)) > made_by_bash.txt
```

```python
value += int(open("made_by_bash.txt").read()) - 41
```

!!! note "Needs a GPU and the Hugging Face Hub"
    Not run by the tests.

<!-- docs-test: skip (needs a GPU and the Hugging Face Hub) -->
```bash
exit 3
```

!!! note "Run from the root of a clone"
    Uses recipes/.

<!-- docs-test: clone -->
```bash
test -f recipes/grpo/toy_nsr.yaml
```

```bash
test ! -e recipes    # the clone layout is gone again
```
"""


def test_harness_runs_blocks_in_order_in_one_directory(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(_SAMPLE)
    workdir = tmp_path / "work"
    workdir.mkdir()
    blocks = code_blocks(page)
    assert [(b.language, b.mark) for b in blocks] == [
        ("python", None),
        ("text", None),
        ("bash", None),
        ("python", None),
        ("bash", "skip"),
        ("bash", "clone"),
        ("bash", None),
    ]
    assert blocks[4].reason == "needs a GPU and the Hugging Face Hub" and blocks[0].line == 3
    namespace = run_markdown(page, workdir)
    assert namespace["value"] == 42
    assert (workdir / "made_by_bash.txt").read_text() == "42\n" and not (workdir / "recipes").exists()
    assert run_markdown(page, workdir, until=1)["value"] == 41


def test_harness_reports_failures_with_the_page_line(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("Text\n\n```bash\ntrue\nfalse\necho never\n```\n")
    with pytest.raises(AssertionError, match=r"page.md:3 \(block 1, bash\) exited with status 1"):
        run_markdown(page, tmp_path)
    page.write_text("Text\n\n\n```python\nx = 1\nraise RuntimeError('boom')\n```\n")
    with pytest.raises(RuntimeError, match="boom") as info:
        run_markdown(page, tmp_path)
    assert info.traceback[-1].lineno + 1 == 6  # the page's own line number
    page.write_text("```sh\nls\n```\n")
    with pytest.raises(ValueError, match="use one of"):
        code_blocks(page)


def test_harness_bash_uses_this_environment(tmp_path):
    page = tmp_path / "page.md"
    page.write_text('```bash\npython -c "import trl_rlvr_ext, sys; print(trl_rlvr_ext.__file__)" > where.txt\n```\n')
    run_markdown(page, tmp_path)
    assert Path((tmp_path / "where.txt").read_text().strip()).is_relative_to(ROOT)


def test_harness_refuses_to_substitute_text(tmp_path):
    with pytest.raises(TypeError, match="no longer substitutes text"):
        run_docs_page("methods/nsr.md", tmp_path, {'output_dir="out",': 'output_dir="out", use_cpu=True,'})
