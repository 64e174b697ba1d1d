"""The command line: fast ``--help`` with launcher options and defaults, packaged recipes and accelerate configs by
name, CPU defaults and the bf16 hint, the activation-checkpointing names, and quiet output."""

import dataclasses
import json
import logging
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import trl_rlvr_ext
from trl_rlvr_ext import _compat, cli
from trl_rlvr_ext.scripts import dpo as dpo_script
from trl_rlvr_ext.scripts import grpo as grpo_script
from trl_rlvr_ext.scripts import launch
from trl_rlvr_ext.scripts.recipes import (
    packaged_accelerate_configs,
    packaged_recipes,
    resolve_accelerate_config,
    resolve_recipe,
)


ROOT = Path(__file__).resolve().parents[1]
FAST = ["--max_steps", "1", "--per_device_train_batch_size", "8", "--num_generations", "4", "--logging_steps", "1"]
HEAVY_MODULES = ("torch", "trl", "transformers", "datasets", "peft", "accelerate")


def _subprocess_env():
    return {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}


def _run_python(code: str, cwd, timeout: int = 300) -> subprocess.CompletedProcess:
    """``python -c code`` in a fresh interpreter (this one's), in ``cwd``, with `_subprocess_env`."""
    return subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        capture_output=True,
        text=True,
        env=_subprocess_env(),
        cwd=cwd,
        timeout=timeout,
    )


# ---------------------------------------------------------------- --help
@pytest.mark.parametrize("command", list(cli.COMMANDS))
def test_help_imports_no_heavy_module(command, tmp_path):
    """`--help` must answer at once: it imports neither torch nor TRL (nor transformers, datasets, ...)."""
    code = (
        "import sys\nfrom trl_rlvr_ext.cli import main\n"
        f"try:\n    code = main([{command!r}, '--help'])\nexcept SystemExit as exit:\n    code = exit.code\n"
        "assert code in (0, None), code\n"
        f"print('HEAVY', [m for m in {HEAVY_MODULES!r} if m in sys.modules])\n"
    )
    result = _run_python(code, tmp_path, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "HEAVY []" in result.stdout, result.stdout[-500:]
    assert "usage:" in result.stdout


@pytest.mark.parametrize("command", ["grpo", "dpo"])
def test_training_help_is_a_short_summary_with_launcher_options_first(command, capsys):
    assert cli.main([command, "--help"]) == 0
    out = capsys.readouterr().out
    positions = [out.index(flag) for flag in ("--config", "--accelerate_config", "--num_processes")]
    assert positions == sorted(positions) and positions[-1] < out.index("most used options")
    assert f"trl-rlvr-ext {command} --help-all" in out
    assert len(out.splitlines()) < 80  # a summary, not TRL's 1,500-line dump
    for line in out.splitlines():
        if line.startswith("  --") and not line.startswith(("  --config", "  --accelerate_config", "  --num_pro")):
            assert "(default: " in line, line


@pytest.mark.parametrize("script", [grpo_script, dpo_script], ids=["grpo", "dpo"])
def test_summary_defaults_are_the_real_defaults(script):
    """The hand-written summary cannot drift from the dataclasses it summarises."""
    parser = script.make_parser()
    fields = {}
    for dataclass_type in parser.dataclass_types:
        for f in dataclasses.fields(dataclass_type):
            if f.default is not dataclasses.MISSING:
                fields[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                fields[f.name] = f.default_factory()
    for option in script.SUMMARY:
        assert option.name in fields, f"{option.name} is not an option of the {script.COMMAND.name} script"
        assert fields[option.name] == option.default, option.name


def test_help_all_prints_every_option(capsys):
    assert cli.main(["grpo", "--help-all"]) == 0
    out = capsys.readouterr().out
    assert out.index("--accelerate_config") < out.index("all options")
    assert "--clip_recovery" in out and "--epsilon_high" in out and "--lora_r" in out


@pytest.mark.parametrize("command", ["eval", "curate", "score_behavior", "demo", "recipes"])
def test_every_option_of_the_argparse_commands_shows_its_default(command):
    import importlib

    parser = importlib.import_module(f"trl_rlvr_ext.scripts.{command}").make_parser()
    lines = parser.format_help().split("\noptions:\n", 1)[1].splitlines()  # past the usage lines
    for action in parser._actions:
        if action.dest == "help":
            continue
        # the option's block: from its line in the options list to the next option
        start = next(i for i, line in enumerate(lines) if line.strip().startswith(action.option_strings[0] + " "))
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("  -")), len(lines))
        assert "(default: " in " ".join(" ".join(lines[start:end]).split()), action.option_strings


# ---------------------------------------------------------------- packaged recipes and accelerate configs
def test_recipes_command_lists_every_packaged_recipe(capsys):
    assert cli.main(["recipes"]) == 0
    out = capsys.readouterr().out
    for recipe in packaged_recipes():
        line = next(line for line in out.splitlines() if line.split()[:1] == [recipe.name])
        assert recipe.command in line.split() and recipe.description in line
    for config in packaged_accelerate_configs():
        assert any(line.split()[:1] == [config.name] for line in out.splitlines())
    assert {r.name for r in packaged_recipes()} >= {"toy_nsr", "toy_self", "toy_rlpo", "toy_isdpo"}
    assert {c.name for c in packaged_accelerate_configs()} >= {"cpu", "multi_gpu", "deepspeed_zero3"}


def test_every_packaged_file_has_a_one_line_description():
    for packaged in [*packaged_recipes(), *packaged_accelerate_configs()]:
        assert 10 < len(packaged.description) <= 120, (packaged.qualified_name, packaged.description)
        assert not packaged.description.endswith((",", "(", "the")), packaged.description


def test_recipes_show_and_path(capsys):
    assert cli.main(["recipes", "--path", "toy_nsr"]) == 0
    path = capsys.readouterr().out.strip()
    assert path.endswith(os.path.join("grpo", "toy_nsr.yaml")) and "trl_rlvr_ext" in path
    assert cli.main(["recipes", "--show", "cpu"]) == 0
    assert "use_cpu: true" in capsys.readouterr().out


def test_recipe_names_resolve_to_packaged_files(tmp_path):
    packaged = resolve_recipe("toy_nsr", "grpo")
    assert Path(packaged).is_file() and Path(packaged).parent.name == "grpo"
    assert resolve_recipe("grpo/toy_nsr", "grpo") == resolve_recipe("toy_nsr.yaml") == packaged
    own = tmp_path / "mine.yaml"
    own.write_text("learning_rate: 1.0e-5\n")
    assert resolve_recipe(str(own), "grpo") == str(own)
    with pytest.raises(SystemExit, match=r"not a packaged recipe\..*toy_nsr, .*trl-rlvr-ext recipes"):
        resolve_recipe("toy_nrs", "grpo")
    with pytest.raises(SystemExit, match="no such file"):
        resolve_recipe(str(tmp_path / "missing.yaml"), "grpo")
    with pytest.raises(SystemExit, match="recipe for `trl-rlvr-ext grpo`, not for `trl-rlvr-ext dpo`"):
        resolve_recipe("toy_nsr", "dpo")


def test_packaged_recipe_parses_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no recipes/ folder here
    script_args, training_args, model_args, _ = launch.parse(grpo_script.COMMAND, ["--config", "toy_nsr"])
    assert training_args.clip_recovery == "nsr" and model_args.model_name_or_path == "toy:base"
    assert script_args.reward_funcs == ["toy_accuracy"]
    _, dpo_args, _, _ = launch.parse(dpo_script.COMMAND, ["--config=dpo/toy_isdpo", "--max_steps", "3"])
    assert dpo_args.importance_sampling is not None and dpo_args.max_steps == 3


def test_accelerate_configs_by_name():
    ours = resolve_accelerate_config("cpu")
    assert Path(ours).parent.name == "accelerate_configs" and "trl_rlvr_ext" in ours
    assert resolve_accelerate_config("multi_gpu") != resolve_accelerate_config("zero3")  # ours first, then TRL's
    assert Path(resolve_accelerate_config("zero3")).parent.parent.name == "trl"
    with pytest.raises(SystemExit, match=r"ours are \['cpu'.*TRL's are \[.*'zero3'"):
        resolve_accelerate_config("zero9")


def test_launcher_options_become_an_accelerate_launch(monkeypatch):
    calls = []
    monkeypatch.setattr(launch.subprocess, "call", lambda command: calls.append(command) or 0)
    assert (
        cli.main(["grpo", "--config", "toy_nsr", "--accelerate_config", "cpu", "--num_processes=2", "--seed", "3"])
        == 0
    )
    (command,) = calls
    assert command[:3] == [sys.executable, "-m", "accelerate.commands.launch"]
    assert command[command.index("--config_file") + 1] == resolve_accelerate_config("cpu")
    assert command[command.index("--num_processes") + 1] == "2"
    tail = command[command.index("-m", 3) :]
    assert tail == ["-m", "trl_rlvr_ext.scripts.grpo", "--config", resolve_recipe("toy_nsr"), "--seed", "3"]


# ---------------------------------------------------------------- CPU: no bf16 trap
@pytest.fixture
def no_bf16_gpu():
    import torch

    if torch.cuda.is_available() and torch.cuda.is_bf16_supported():
        pytest.skip("this machine has a bf16 GPU: TRL's bf16 default works here")


def test_bf16_on_a_cpu_machine_names_the_flag_to_add(no_bf16_gpu, tmp_path):
    argv = ["--model_name_or_path", "toy:tiny", "--dataset_name", "toy:arithmetic", "--output_dir", str(tmp_path)]
    with pytest.raises(SystemExit) as raised:
        launch.parse(grpo_script.COMMAND, argv)
    message = str(raised.value)
    assert message.startswith("trl-rlvr-ext grpo: bf16 is on")
    assert "`--use_cpu true`" in message and "`--bf16 false`" in message
    # either flag is enough
    assert launch.parse(grpo_script.COMMAND, [*argv, "--use_cpu", "true"])[1].use_cpu
    assert launch.parse(dpo_script.COMMAND, [*argv, "--bf16", "false"])[1].bf16 is False


def test_no_silent_default_reward_outside_the_toy_dataset(tmp_path, capsys):
    """The toy's reward on other data scores every completion 0: the CLI requires --reward_funcs there, before any
    model loads, and says which reward it uses for the toy dataset."""
    data = tmp_path / "arith.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{i}+{i}=", "answer": str(2 * i)}) + "\n" for i in range(4)))
    base = ["--model_name_or_path", str(tmp_path / "not-loaded"), "--use_cpu", "true", "--output_dir", str(tmp_path)]
    parsed = launch.parse(grpo_script.COMMAND, [*base, "--dataset_name", str(data)])
    assert parsed[0].reward_funcs is None
    with pytest.raises(ValueError, match=r"No reward given for the dataset '.*arith.jsonl': set --reward_funcs"):
        grpo_script.build_trainer(*parsed)
    toy = launch.parse(grpo_script.COMMAND, [*base, "--dataset_name", "toy:arithmetic", "--max_steps", "0"])
    with pytest.raises(Exception) as raised:  # the model path does not exist: only the printed choice matters
        grpo_script.build_trainer(*toy)
    assert "reward_funcs not set: using toy_accuracy, the reward of toy:arithmetic." in capsys.readouterr().out
    assert "No reward given" not in str(raised.value)


def test_accelerate_cpu_config_trains_on_cpu_in_fp32(no_bf16_gpu, monkeypatch, tmp_path):
    """Under `accelerate launch` with a CPU config, the script adds --use_cpu true --bf16 false (unless set)."""
    monkeypatch.setenv("ACCELERATE_USE_CPU", "true")
    own = tmp_path / "recipe.yaml"
    own.write_text("model_name_or_path: toy:tiny\ndataset_name: toy:arithmetic\nreport_to: none\n")
    _, training_args, _, _ = launch.parse(grpo_script.COMMAND, ["--config", str(own), "--output_dir", str(tmp_path)])
    assert training_args.use_cpu and training_args.bf16 is False
    # a recipe's or the command line's own choice wins
    own.write_text("model_name_or_path: toy:tiny\nbf16: true\nuse_cpu: true\n")
    assert launch.parse(grpo_script.COMMAND, ["--config", str(own), "--output_dir", str(tmp_path)])[1].bf16 is True


@pytest.mark.parametrize("recipe", [r.name for r in packaged_recipes() if r.name.startswith("toy_")])
def test_toy_recipes_set_what_a_cpu_needs(recipe):
    command = dpo_script.COMMAND if Path(resolve_recipe(recipe)).parent.name == "dpo" else grpo_script.COMMAND
    _, training_args, _, _ = launch.parse(command, ["--config", recipe])
    assert training_args.use_cpu and not training_args.bf16


# ---------------------------------------------------------------- activation checkpointing: the new name, a fallback
def test_installed_transformers_has_activation_checkpointing():
    from transformers import TrainingArguments

    has_it = "activation_checkpointing" in {f.name for f in dataclasses.fields(TrainingArguments)}
    assert _compat.activation_checkpointing_name() == (
        "activation_checkpointing" if has_it else "gradient_checkpointing"
    )
    assert _compat.activation_checkpointing_kwargs(False) == {_compat.activation_checkpointing_name(): False}


def test_checkpointing_names_fall_back_on_an_older_transformers(monkeypatch, tmp_path):
    """transformers 5.18 (inside our pin) knows only `gradient_checkpointing`: recipes and flags are renamed."""
    monkeypatch.setattr(_compat, "activation_checkpointing_name", lambda: "gradient_checkpointing")
    assert _compat.activation_checkpointing_kwargs(True) == {"gradient_checkpointing": True}
    recipe = resolve_recipe("toy_nsr")
    argv = launch.adapt_checkpointing_names(["--config", recipe, "--activation_checkpointing=true"], str(tmp_path))
    assert argv[-1] == "--gradient_checkpointing=true"
    import yaml

    adapted = yaml.safe_load(Path(argv[1]).read_text())
    assert adapted["gradient_checkpointing"] is False and "activation_checkpointing" not in adapted
    assert Path(argv[1]).parent == tmp_path  # the packaged recipe itself is untouched
    assert "activation_checkpointing: false" in Path(recipe).read_text()
    _, training_args, _, _ = launch.parse(grpo_script.COMMAND, ["--config", "toy_nsr"])
    assert training_args.activation_checkpointing is False  # same meaning through the old name


def test_no_recipe_uses_the_deprecated_checkpointing_name():
    for recipe in packaged_recipes():
        assert not re.search(r"^gradient_checkpointing", Path(recipe.path).read_text(), re.MULTILINE), recipe.name


def test_recipes_raise_no_future_warning_and_the_toy_recipe_trains(tiny_model_path, tmp_path):
    """No FutureWarning comes from our recipes or our code (TRL's own calls into transformers are not ours)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for recipe in packaged_recipes():
            command = dpo_script.COMMAND if recipe.command == "dpo" else grpo_script.COMMAND
            cpu = ["--use_cpu", "true", "--bf16", "false"] + (
                ["--use_vllm", "false"] if recipe.command == "grpo" else []
            )
            launch.parse(command, ["--config", recipe.name, *cpu])
        argv = ["--config", "toy_nsr", "--model_name_or_path", tiny_model_path, "--output_dir", str(tmp_path), *FAST]
        assert grpo_script.cli_main(argv) == 0
    # "ours": raised from a file of the package itself (a path test, not a substring: a clone or venv under a folder
    # named trl_rlvr_ext puts that name in every installed package's path)
    package = Path(trl_rlvr_ext.__file__).resolve().parent
    ours = [
        w
        for w in caught
        if issubclass(w.category, FutureWarning)
        and (
            Path(w.filename).resolve().is_relative_to(package)
            or "`gradient_checkpointing` is deprecated" in str(w.message)
        )
    ]
    assert not ours, [f"{w.filename}:{w.lineno}: {w.message}" for w in ours]
    assert (tmp_path / "config.json").is_file()


# ---------------------------------------------------------------- bitsandbytes' notice
def test_bitsandbytes_kernel_notice_is_held_until_4bit_is_asked_for(caplog):
    logger = logging.getLogger("bitsandbytes.backends.cpu.ops")
    _compat.hold_bitsandbytes_kernel_notice()
    with caplog.at_level(logging.WARNING, logger="bitsandbytes.backends.cpu.ops"):
        logger.warning("Failed to load CPU gemm_4bit_forward from kernels-community: %s.", "No module named 'kernels'")
        logger.warning("another bitsandbytes warning")
        assert [r.getMessage() for r in caplog.records] == ["another bitsandbytes warning"]
        _compat.replay_bitsandbytes_kernel_notice()
        assert "Failed to load CPU gemm_4bit_forward" in caplog.records[-1].getMessage()
    _compat.hold_bitsandbytes_kernel_notice()


def test_the_kernels_offline_notice_for_that_kernel_only_is_held(caplog):
    # transformers >= 5.25 installs `kernels`; offline it logs a skipped publisher check while bitsandbytes looks for
    # its 4-bit CPU kernel. Only that repository's notice is held; the same logger's other records pass.
    logger = logging.getLogger("kernels._internals.hf_hub")
    _compat.hold_bitsandbytes_kernel_notice()
    with caplog.at_level(logging.WARNING, logger="kernels._internals.hf_hub"):
        logger.warning(
            "Skipping publisher trust check for 'kernels-community/quantization-bitsandbytes' because Hugging Face Hub "
            "is in offline mode."
        )
        logger.warning(
            "Skipping publisher trust check for 'someone/else' because Hugging Face Hub is in offline mode."
        )
        assert [r.getMessage() for r in caplog.records] == [
            "Skipping publisher trust check for 'someone/else' because Hugging Face Hub is in offline mode."
        ]
        _compat.replay_bitsandbytes_kernel_notice()
        assert "quantization-bitsandbytes" in caplog.records[-1].getMessage()
    _compat.hold_bitsandbytes_kernel_notice()


def test_importing_the_package_leaves_other_libraries_logging_alone(tmp_path):
    """A library changes no other library's behaviour at import: `import trl_rlvr_ext`, and the trainers it exports,
    add no filter to the bitsandbytes / kernels loggers (the commands hold their notice: the test below)."""
    code = (
        "import logging\n"
        "names = ['bitsandbytes', 'bitsandbytes.backends.cpu.ops', 'kernels', 'kernels._internals.hf_hub']\n"
        "before = [list(logging.getLogger(n).filters) for n in names]\n"
        "import trl_rlvr_ext\n"
        "print('package', [list(logging.getLogger(n).filters) for n in names] == before)\n"
        "from trl_rlvr_ext import RLVRGRPOConfig, ISDPOConfig\n"
        "print('trainers', [list(logging.getLogger(n).filters) for n in names] == before)\n"
    )
    result = _run_python(code, tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "package True" in result.stdout and "trainers True" in result.stdout, result.stdout


def test_the_commands_print_no_bitsandbytes_line(tmp_path):
    code = "import trl_rlvr_ext.scripts\nfrom trl_rlvr_ext import RLVRGRPOConfig, ISDPOConfig\nprint('ok')"
    result = _run_python(code, tmp_path)
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr[-2000:]
    assert "gemm_4bit_forward" not in result.stderr and "kernels" not in result.stderr


# ---------------------------------------------------------------- install hints
def test_install_hints_point_at_what_exists():
    """No hint asks to `pip install trl-rlvr-ext...` from a registry where nothing is published: hints name the
    dependency itself (published) or the package from a clone / a built wheel."""
    unpublished = re.compile(r"pip install\s+['\"]?trl-rlvr-ext")
    files = [p for p in (ROOT / "trl_rlvr_ext").rglob("*") if p.suffix in (".py", ".yaml")]
    files += [ROOT / "docs" / "installation.md", ROOT / "README.md"]
    hints = 0
    for path in files:
        for line in path.read_text().splitlines():
            if "pip install" in line:
                hints += 1
                assert not unpublished.search(line), f"{path.relative_to(ROOT)}: {line.strip()}"
    assert hints >= 5
    installation = (ROOT / "docs" / "installation.md").read_text()
    for needed in ("pip install -e .", "python -m build", "pip wheel . --no-deps -w dist", "dist/trl_rlvr_ext-"):
        assert needed in installation, needed


def test_console_script_and_package_data_are_declared():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["scripts"]["trl-rlvr-ext"] == "trl_rlvr_ext.cli:main"
    assert "**/*.yaml" in project["tool"]["setuptools"]["package-data"]["trl_rlvr_ext"]
    assert json.dumps(sorted(cli.COMMANDS)) == json.dumps(
        sorted(
            [
                "curate",
                "demo",
                "dpo",
                "eval",
                "grpo",
                "recipes",
                "relex",
                "score-behavior",
                "setup-vllm-cpu",
                "vllm-serve",
            ]
        )
    )


@pytest.mark.slow
def test_accelerate_config_cpu_runs_a_recipe_without_cpu_settings(no_bf16_gpu, tiny_model_path, tmp_path):
    """`trl-rlvr-ext grpo --config <recipe> --accelerate_config cpu` on a recipe that says nothing about CPU or bf16."""
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        f"model_name_or_path: {tiny_model_path}\ndataset_name: toy:arithmetic\nreward_funcs: [toy_accuracy]\n"
        "max_completion_length: 7\nreport_to: none\nactivation_checkpointing: false\n"
    )
    command = [sys.executable, "-m", "trl_rlvr_ext.cli", "grpo", "--config", str(recipe), "--accelerate_config", "cpu"]
    command += ["--output_dir", str(tmp_path / "run"), *FAST]
    env = {**_subprocess_env(), "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, check=False, capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Model saved to" in result.stdout and (tmp_path / "run" / "config.json").is_file()


def test_command_lines_live_in_scripts_only():
    """Every CLI is a module of trl_rlvr_ext/scripts; library modules hold no argparse and never import the scripts."""
    import ast

    package = ROOT / "trl_rlvr_ext"
    for path in package.rglob("*.py"):
        relative = path.relative_to(package).as_posix()
        if relative.startswith("scripts/") or relative == "cli.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [("." * node.level) + (node.module or "")]
            else:
                continue
            for name in names:
                assert name != "argparse", f"{relative} imports argparse: move its command line to scripts/"
                assert "scripts" not in name.split("."), f"{relative} imports {name}: a library never imports scripts"
    for name, (module, _) in cli.COMMANDS.items():
        assert (package / "scripts" / f"{module}.py").is_file(), name


def test_scripts_run_as_modules(tmp_path):
    for module in ("grpo", "dpo", "eval", "curate", "score_behavior", "demo", "recipes"):
        result = subprocess.run(
            [sys.executable, "-m", f"trl_rlvr_ext.scripts.{module}", "--help"],
            check=False,
            capture_output=True,
            text=True,
            env=_subprocess_env(),
            cwd=tmp_path,
            timeout=120,
        )
        assert result.returncode == 0 and "usage:" in result.stdout, (module, result.stderr[-1000:])
