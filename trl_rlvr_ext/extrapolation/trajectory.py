"""The trajectory folder RELEX fits: θ_0 as a saved model (or adapter), and θ_s − θ_0 for every recorded step.

    <trajectory>/manifest.json                      format, kind ("model" or "adapter"), dtype, every, steps
    <trajectory>/base/                              θ_0 as `save_pretrained` wrote it (+ the tokenizer)
    <trajectory>/deltas/step_<s>.safetensors        θ_s − θ_0 of every tensor of base/'s weight files, in `dtype`

Deltas, not weights, are stored: a small update of a bfloat16 or float16 weight is often below the weight's own
resolution, while its delta keeps full relative precision (the authors store float16 deltas for the same reason).
The tensors and their names are those of base/'s weight files, so a prediction is written into a copy of base/ with
the same header: the folder `save_pretrained` would write. Files are written to a temporary name and renamed, the
manifest last, so a killed run leaves a readable trajectory.

No trainer and no TRL here: safetensors, json and torch only.
"""

import json
import mmap
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from safetensors import safe_open

from .._io import AtomicTarget, atomic_target, atomic_write


MANIFEST = "manifest.json"
FORMAT = "trl_rlvr_ext.relex_trajectory"
VERSION = 1
BASE_DIR = "base"
DELTA_DIR = "deltas"
KINDS = ("model", "adapter")
RECORD_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
# safetensors' names of the floating-point dtypes: the tensors a trajectory records
FLOAT_DTYPES = {"F16": torch.float16, "BF16": torch.bfloat16, "F32": torch.float32, "F64": torch.float64}
_DTYPE_NAMES = {dtype: name for name, dtype in FLOAT_DTYPES.items()}
# Weight files of a saved model or adapter, sharded or not (the index names the shards)
_WEIGHT_FILES = ("model.safetensors", "adapter_model.safetensors")
_WEIGHT_INDEX = "model.safetensors.index.json"


@dataclass
class Manifest:
    """What a trajectory folder holds. ``steps`` are optimizer steps, increasing, each with its delta file."""

    kind: str
    dtype: str
    every: int
    steps: list[int] = field(default_factory=list)
    format: str = FORMAT
    version: int = VERSION
    base: str = BASE_DIR

    def to_dict(self) -> dict:
        return {
            "format": self.format,
            "version": self.version,
            "kind": self.kind,
            "dtype": self.dtype,
            "every": self.every,
            "base": self.base,
            "steps": list(self.steps),
        }


def read_manifest(directory: str) -> Manifest:
    path = os.path.join(directory, MANIFEST)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"{directory!r} is not a RELEX trajectory: it has no {MANIFEST}. Record one with relex_record_steps > 0 "
            "(RLVRGRPOConfig), or point to the folder its relex_trajectory_dir named."
        )
    with open(path) as f:
        data = json.load(f)
    if data.get("format") != FORMAT:
        raise ValueError(f"{path} is not a RELEX trajectory manifest (format {data.get('format')!r}).")
    if data.get("version") != VERSION:
        raise ValueError(f"{path}: trajectory format version {data.get('version')!r}; this package reads {VERSION}.")
    if data.get("kind") not in KINDS or data.get("dtype") not in RECORD_DTYPES:
        raise ValueError(f"{path}: unknown kind {data.get('kind')!r} or dtype {data.get('dtype')!r}.")
    return Manifest(
        kind=data["kind"], dtype=data["dtype"], every=int(data["every"]), steps=[int(s) for s in data["steps"]]
    )


def write_manifest(directory: str, manifest: Manifest) -> None:
    atomic_write(os.path.join(directory, MANIFEST), json.dumps(manifest.to_dict(), indent=2))


def delta_path(directory: str, step: int) -> str:
    return os.path.join(directory, DELTA_DIR, f"step_{step:08d}.safetensors")


def base_dir(directory: str) -> str:
    return os.path.join(directory, BASE_DIR)


def weight_files(folder: str) -> list[str]:
    """The safetensors weight files of a saved model or adapter folder (the shards of an index, in order)."""
    index = os.path.join(folder, _WEIGHT_INDEX)
    if os.path.isfile(index):
        with open(index) as f:
            shards = sorted(set(json.load(f)["weight_map"].values()))
        return [os.path.join(folder, shard) for shard in shards]
    for name in _WEIGHT_FILES:
        if os.path.isfile(os.path.join(folder, name)):
            return [os.path.join(folder, name)]
    raise FileNotFoundError(
        f"{folder!r} holds no safetensors weights ({', '.join(_WEIGHT_FILES)} or {_WEIGHT_INDEX}): RELEX reads and "
        "writes safetensors only."
    )


@dataclass(frozen=True)
class TensorEntry:
    """One tensor of a safetensors file, from its header: where its bytes lie after the header."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int

    @property
    def numel(self) -> int:
        n = 1
        for size in self.shape:
            n *= size
        return n


def read_header(path: str) -> tuple[bytes, list[TensorEntry]]:
    """The raw header (length prefix included) and the tensors in the order of their bytes."""
    with open(path, "rb") as f:
        prefix = f.read(8)
        (length,) = struct.unpack("<Q", prefix)
        raw = f.read(length)
    header = json.loads(raw)
    header.pop("__metadata__", None)
    entries = [
        TensorEntry(name, info["dtype"], tuple(info["shape"]), *info["data_offsets"]) for name, info in header.items()
    ]
    return prefix + raw, sorted(entries, key=lambda e: e.begin)


def tracked_tensors(folder: str) -> dict[str, TensorEntry]:
    """Every floating-point tensor of a saved folder's weight files, by name: what a trajectory records."""
    tracked = {}
    for path in weight_files(folder):
        for entry in read_header(path)[1]:
            if entry.dtype in FLOAT_DTYPES:
                tracked[entry.name] = entry
    return tracked


class BaseWeights:
    """θ_0's recorded tensors, memory-mapped from base/'s weight files and read in place.

    A recording subtracts θ_0 at every step: reading it through the mapping costs no copy and holds no second model in
    memory (the OS page cache holds the file, shared). The mapping is copy-on-write, so the tensors are writable as
    torch expects, and nothing is ever written back to the file.
    """

    def __init__(self, folder: str):
        self._maps, self._tensors = [], {}
        for path in weight_files(folder):
            raw_header, entries = read_header(path)
            with open(path, "rb") as f:
                mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
            self._maps.append(mapped)
            for entry in entries:
                if entry.dtype not in FLOAT_DTYPES:
                    continue
                dtype = FLOAT_DTYPES[entry.dtype]
                if entry.numel == 0:  # torch.frombuffer refuses a count of 0
                    self._tensors[entry.name] = torch.empty(entry.shape, dtype=dtype)
                    continue
                offset = len(raw_header) + entry.begin
                tensor = torch.frombuffer(mapped, dtype=dtype, count=entry.numel, offset=offset)
                self._tensors[entry.name] = tensor.view(entry.shape)

    def __getitem__(self, name: str) -> torch.Tensor:
        return self._tensors[name]

    def names(self) -> list[str]:
        """The recorded tensors, in the byte order of base/'s files."""
        return list(self._tensors)

    def close(self) -> None:
        self._tensors = {}
        for mapped in self._maps:
            mapped.close()
        self._maps = []


@dataclass(frozen=True)
class DeltaBuffer:
    """θ_s − θ_0 of one step in one flat buffer in the record dtype, with the header of its safetensors file: computed
    on the training step (a copy the next optimizer step cannot change), written later by `write_delta_file`."""

    header: bytes
    data: torch.Tensor


class DeltaLayout:
    """Where each recorded tensor's delta lies in a step's file: the same for every step of a trajectory, so the
    header is built once and a recording is one subtraction per tensor into one buffer."""

    def __init__(self, base: BaseWeights, dtype: torch.dtype):
        self.base, self.dtype = base, dtype
        self.spans, header, offset = [], {}, 0
        for name in base.names():
            numel = base[name].numel()
            self.spans.append((name, offset, offset + numel))
            header[name] = {
                "dtype": _DTYPE_NAMES[dtype],
                "shape": list(base[name].shape),
                "data_offsets": [offset * dtype.itemsize, (offset + numel) * dtype.itemsize],
            }
            offset += numel
        self.numel = offset
        raw = json.dumps(header, separators=(",", ":")).encode()
        raw += b" " * (-len(raw) % 8)  # safetensors pads the header so the data starts 8-byte aligned
        self.header = struct.pack("<Q", len(raw)) + raw

    def compute(self, state_dict: dict[str, torch.Tensor]) -> DeltaBuffer:
        data = torch.empty(self.numel, dtype=self.dtype)
        for name, begin, end in self.spans:
            # in float32, then rounded once to the record dtype (a delta below a bf16 weight's resolution survives)
            current = state_dict[name].detach().to("cpu", torch.float32)
            data[begin:end].copy_((current - self.base[name].float()).reshape(-1))
        return DeltaBuffer(self.header, data)


def write_delta_file(directory: str, step: int, deltas: DeltaBuffer) -> str:
    """Write a step's `DeltaBuffer` as its safetensors file (atomically: a temporary file renamed over it)."""
    path = delta_path(directory, step)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with atomic_target(path) as tmp, open(tmp, "wb") as f:
        f.write(deltas.header)
        f.write(deltas.data.view(torch.uint8).numpy().data)
    return path


class TrajectoryReader:
    """Reads one tensor's history at a time: the rows θ_s − θ_0 of ``steps`` as a (T, d) float32 matrix.

    The delta files are memory-mapped (`safe_open`), so only the requested tensor is read; ``peak_elements`` is the
    largest matrix handed out, the bound on what the fit holds (one tensor's history, never the model's).
    """

    def __init__(self, directory: str, steps: list[int]):
        self._files = []
        for step in steps:
            path = delta_path(directory, step)
            if not os.path.isfile(path):
                raise FileNotFoundError(f"The manifest lists step {step}, but its delta file {path} is missing.")
            self._files.append(safe_open(path, framework="pt"))
        self.peak_elements = 0

    def history(self, name: str) -> torch.Tensor:
        rows = [handle.get_tensor(name).reshape(-1).float() for handle in self._files]
        matrix = torch.stack(rows)
        self.peak_elements = max(self.peak_elements, matrix.numel())
        return matrix

    def row(self, index: int, name: str) -> torch.Tensor:
        return self._files[index].get_tensor(name).reshape(-1).float()


def tensor_bytes(tensor: torch.Tensor) -> bytes:
    """A tensor's bytes as safetensors stores them (row-major, little-endian; bfloat16 included)."""
    return tensor.contiguous().view(torch.uint8).numpy().tobytes()


class StreamingSafetensorsWriter:
    """Writes a safetensors file with a given header one tensor at a time, in the header's byte order.

    A prediction has the base's names, dtypes and shapes, so its header is the base file's, byte for byte; each
    tensor's bytes are written as soon as they are computed, and no state dict is ever assembled.
    """

    def __init__(self, path: str, raw_header: bytes, entries: list[TensorEntry]):
        self.path, self._entries, self._next = path, entries, 0
        self._target = AtomicTarget(path)
        self._file = open(self._target.tmp, "wb")  # noqa: SIM115 -- closed in close()
        self._file.write(raw_header)

    def write(self, name: str, data: bytes) -> None:
        entry = self._entries[self._next]
        if entry.name != name or len(data) != entry.end - entry.begin:
            raise RuntimeError(f"{self.path}: expected {entry.name} ({entry.end - entry.begin} bytes), got {name}.")
        self._file.write(data)
        self._next += 1

    def close(self) -> None:
        self._file.close()
        if self._next != len(self._entries):
            self._target.discard()
            raise RuntimeError(f"{self.path}: {len(self._entries) - self._next} tensors were never written.")
        self._target.commit()

    def abort(self) -> None:
        self._file.close()
        self._target.discard()


def iter_base_tensors(path: str) -> Iterator[tuple[TensorEntry, torch.Tensor]]:
    """The tensors of one weight file, in byte order, read one at a time."""
    _, entries = read_header(path)
    with safe_open(path, framework="pt") as handle:
        for entry in entries:
            yield entry, handle.get_tensor(entry.name)
