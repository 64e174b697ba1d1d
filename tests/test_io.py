"""The package's one atomic file write (`trl_rlvr_ext._io`): text, bytes and a writer callback land whole, a failed
write leaves the old file and no temporary file, and `AtomicTarget` commits or discards a file written over calls."""

import json
import os

import pytest
import torch

from trl_rlvr_ext._io import AtomicTarget, atomic_target, atomic_write


def test_text_and_bytes_replace_the_file_whole(tmp_path):
    path = tmp_path / "out.json"
    atomic_write(path, json.dumps({"a": "é"}))
    assert path.read_bytes() == json.dumps({"a": "é"}).encode()
    atomic_write(str(path), b"\x00\x01")
    assert path.read_bytes() == b"\x00\x01"
    atomic_write(path, "synced\n", fsync=True)
    assert path.read_text() == "synced\n"
    assert os.listdir(tmp_path) == ["out.json"]


def test_a_writer_callback_and_a_failed_write(tmp_path):
    path = tmp_path / "state.pt"
    with atomic_target(path) as tmp:
        assert tmp == f"{path}.tmp-{os.getpid()}" and not path.exists()
        torch.save({"x": torch.arange(3)}, tmp)
    assert torch.equal(torch.load(path)["x"], torch.arange(3))
    with pytest.raises(RuntimeError, match="killed"), atomic_target(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(b"half")
        raise RuntimeError("killed mid-write")
    assert torch.equal(torch.load(path)["x"], torch.arange(3))  # the old file, whole
    assert os.listdir(tmp_path) == ["state.pt"]


def test_a_target_written_over_calls_commits_or_discards(tmp_path):
    target = AtomicTarget(tmp_path / "weights.bin")
    with open(target.tmp, "wb") as f:
        f.write(b"abc")
    assert not (tmp_path / "weights.bin").exists()
    target.commit()
    assert (tmp_path / "weights.bin").read_bytes() == b"abc"
    again = AtomicTarget(tmp_path / "weights.bin")
    with open(again.tmp, "wb") as f:
        f.write(b"partial")
    again.discard()
    again.discard()  # nothing left to remove: not an error
    assert os.listdir(tmp_path) == ["weights.bin"] and (tmp_path / "weights.bin").read_bytes() == b"abc"
