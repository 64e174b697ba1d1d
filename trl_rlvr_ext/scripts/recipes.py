"""The recipes and accelerate configs that ship inside the package, by name: ``trl-rlvr-ext recipes`` lists them.

    trl-rlvr-ext recipes                          # name, command, one-line description
    trl-rlvr-ext grpo --config toy_nsr            # a packaged recipe by name (also: grpo/toy_nsr)
    trl-rlvr-ext grpo --config my_recipe.yaml     # or any YAML file
    trl-rlvr-ext grpo --config toy_nsr --accelerate_config cpu    # a packaged accelerate config by name

Recipes live in ``trl_rlvr_ext/recipes/<kind>/<name>.yaml`` (kinds: grpo, curation and lora_init train with
``trl-rlvr-ext grpo``; dpo with ``trl-rlvr-ext dpo``); accelerate configs in ``trl_rlvr_ext/recipes/accelerate_configs``.
Each file's first comment line is its description. This module imports nothing heavy: it serves ``--help``.
"""

import argparse
import importlib.resources
import os
from dataclasses import dataclass


ACCELERATE_KIND = "accelerate_configs"
# recipe folder -> the subcommand that trains it
RECIPE_COMMANDS = {"grpo": "grpo", "curation": "grpo", "lora_init": "grpo", "dpo": "dpo"}


@dataclass(frozen=True)
class PackagedFile:
    name: str  # file name without .yaml
    kind: str  # its folder: grpo, curation, lora_init, dpo or accelerate_configs
    path: str
    description: str

    @property
    def qualified_name(self) -> str:
        return f"{self.kind}/{self.name}"

    @property
    def command(self) -> str | None:
        return RECIPE_COMMANDS.get(self.kind)


def _description(path) -> str:
    """The first line of the file's leading comment block (without the ``#``)."""
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            return line.lstrip("#").strip() if line.startswith("#") else ""
    return ""


def _packaged(kinds) -> list[PackagedFile]:
    root = importlib.resources.files("trl_rlvr_ext").joinpath("recipes")
    files = []
    for kind in kinds:
        folder = root.joinpath(kind)
        if not folder.is_dir():
            continue
        for entry in sorted(folder.iterdir(), key=lambda p: p.name):
            if entry.name.endswith(".yaml"):
                path = str(entry)
                files.append(PackagedFile(entry.name[: -len(".yaml")], kind, path, _description(path)))
    return files


def packaged_recipes(command: str | None = None) -> list[PackagedFile]:
    """The packaged training recipes (those trained by ``command`` when given: "grpo" or "dpo")."""
    return [r for r in _packaged(RECIPE_COMMANDS) if command is None or r.command == command]


def packaged_accelerate_configs() -> list[PackagedFile]:
    return _packaged([ACCELERATE_KIND])


def _looks_like_a_path(value: str) -> bool:
    return value.endswith((".yaml", ".yml")) or value.startswith((".", "/", "~")) or value.count("/") > 1


def resolve_recipe(name_or_path: str, command: str | None = None) -> str:
    """The YAML file for ``--config``: an existing file, or a packaged recipe by name (``toy_nsr``, ``grpo/toy_nsr``).

    Raises `SystemExit` with the available names when it is neither (or when the recipe trains with another command).
    """
    if os.path.isfile(name_or_path):
        return name_or_path
    name = name_or_path.removesuffix(".yaml")
    matches = [r for r in packaged_recipes() if name in (r.name, r.qualified_name)]
    prog = f"trl-rlvr-ext {command}" if command else "trl-rlvr-ext"
    if len(matches) > 1:
        raise SystemExit(
            f"{prog}: recipe name {name_or_path!r} is ambiguous: use one of {[r.qualified_name for r in matches]}."
        )
    if not matches:
        available = [r.name for r in packaged_recipes(command)]
        what = "no such file" if _looks_like_a_path(name_or_path) else "not a packaged recipe"
        raise SystemExit(
            f"{prog}: --config {name_or_path!r}: {what}. Give a path to a YAML file, or one of the packaged "
            f"recipes{f' for {command!r}' if command else ''}: {', '.join(available)} (`trl-rlvr-ext recipes` lists "
            "them with a description)."
        )
    (recipe,) = matches
    if command is not None and recipe.command != command:
        raise SystemExit(
            f"{prog}: {recipe.qualified_name} is a recipe for `trl-rlvr-ext {recipe.command}`, not for "
            f"`{prog}`. Run: trl-rlvr-ext {recipe.command} --config {recipe.name}"
        )
    return recipe.path


def resolve_accelerate_config(name_or_path: str) -> str:
    """A path to an accelerate config file: the path itself, one of ours by name (``cpu``, ``multi_gpu``, ...), then
    one of TRL's by name (``zero1``, ``zero3``, ``fsdp1``, ...)."""
    if os.path.isfile(name_or_path):
        return name_or_path
    name = name_or_path.removesuffix(".yaml")
    ours = {c.name: c.path for c in packaged_accelerate_configs()}
    if name in ours:
        return ours[name]
    trl_configs = importlib.resources.files("trl").joinpath("accelerate_configs")
    packaged = trl_configs.joinpath(f"{name}.yaml")
    if packaged.is_file():
        return str(packaged)
    theirs = sorted(p.name[: -len(".yaml")] for p in trl_configs.iterdir() if p.name.endswith(".yaml"))
    raise SystemExit(
        f"trl-rlvr-ext: accelerate config {name_or_path!r} is neither a file nor a packaged config: ours are "
        f"{sorted(ours)}, TRL's are {[n for n in theirs if n not in ours]}. Pass one of these names or a path to an "
        "accelerate config file."
    )


def format_listing() -> str:
    recipes, configs = packaged_recipes(), packaged_accelerate_configs()
    width = max(len(f.name) for f in recipes + configs) + 2
    lines = ["Recipes (run with `trl-rlvr-ext <command> --config <name>`; add --key value to override a setting):", ""]
    lines.append(f"  {'name':<{width}}{'command':<9}description")
    lines += [f"  {r.name:<{width}}{r.command:<9}{r.description}" for r in recipes]
    lines += [
        "",
        "Accelerate configs (pass with `--accelerate_config <name>`; TRL's zero1, zero2, zero3, fsdp1, ... work too):",
        "",
    ]
    lines += [f"  {c.name:<{width}}{c.description}" for c in configs]
    lines += ["", "Print a recipe to start your own: trl-rlvr-ext recipes --show <name>"]
    return "\n".join(lines)


def make_parser(prog: str = "trl-rlvr-ext recipes") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="List the recipes and accelerate configs that ship with the package, or print one.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--show", metavar="NAME", default=None, help="Print this recipe or accelerate config.")
    parser.add_argument("--path", metavar="NAME", default=None, help="Print the file path of this recipe or config.")
    return parser


def cli_main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    name = args.show or args.path
    if name is None:
        print(format_listing())
        return 0
    try:
        path = resolve_recipe(name)
    except SystemExit as recipe_error:
        try:
            path = resolve_accelerate_config(name)
        except SystemExit:
            raise recipe_error from None
    if args.path:
        print(path)
    else:
        with open(path) as f:
            print(f.read(), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(cli_main())
