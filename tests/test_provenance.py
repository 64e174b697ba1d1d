"""Where a record came from (`trl_rlvr_ext.provenance`): every field, the weight digest of a model folder, and the
studies' runs carrying it."""

import hashlib
import json

from trl_rlvr_ext.provenance import LIBRARIES, provenance, weights_digest


def test_provenance_names_time_commit_versions_threads_seed_and_weights(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    record = provenance(tmp_path, num_threads=1, seed=3)
    assert set(record) == {"time", "commit", "versions", "num_threads", "seed", "weights_sha256"}
    assert record["num_threads"] == 1 and record["seed"] == 3 and record["time"].endswith("+00:00")
    assert set(record["versions"]) == {*LIBRARIES, "trl_rlvr_ext"} and all(record["versions"].values())
    assert record["weights_sha256"] == hashlib.sha256(b"weights").hexdigest()
    assert len(record["commit"]) == 40 or record["commit"] == "unknown"
    assert "seed" not in provenance(None, num_threads=2) and provenance(None, num_threads=2)["weights_sha256"] is None


def test_weights_digest_reads_a_pretrained_models_gguf_sha_and_hashes_shards_in_order(tmp_path):
    (tmp_path / "pretrained.json").write_text(json.dumps({"gguf_sha256": "abc"}))
    assert weights_digest(tmp_path) == "abc"  # the converted model's source file, as the provider recorded it
    shards = tmp_path / "shards"
    shards.mkdir()
    (shards / "model-00002-of-00002.safetensors").write_bytes(b"two")
    (shards / "model-00001-of-00002.safetensors").write_bytes(b"one")
    assert weights_digest(shards) == hashlib.sha256(b"onetwo").hexdigest()
    assert weights_digest(tmp_path / "missing") is None and weights_digest("org/hub-id") is None


def test_study_runs_carry_their_provenance():
    """The golden quick runs' records name it (normalised there, since it names the machine and the moment)."""
    from pathlib import Path

    golden = Path(__file__).resolve().parent / "golden" / "studies"
    results = sorted(golden.rglob("result.json"))
    assert results and all(json.loads(path.read_text())["provenance"] == "<provenance>" for path in results)
