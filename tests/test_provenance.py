"""Where a record came from (`trl_rlvr_ext.provenance`): every field, the weight digest of a model folder, and the
studies' runs carrying it."""

import hashlib
import json

from trl_rlvr_ext.provenance import LIBRARIES, cpu_info, provenance, weights_digest


def test_provenance_names_time_commit_versions_threads_cpu_seed_and_weights(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    record = provenance(tmp_path, num_threads=1, seed=3)
    assert set(record) == {"time", "commit", "versions", "num_threads", "cpu", "seed", "weights_sha256"}
    assert record["cpu"] == cpu_info() and set(record["cpu"]) == {"model", "bf16"}
    assert record["num_threads"] == 1 and record["seed"] == 3 and record["time"].endswith("+00:00")
    assert set(record["versions"]) == {*LIBRARIES, "trl_rlvr_ext"} and all(record["versions"].values())
    assert record["weights_sha256"] == hashlib.sha256(b"weights").hexdigest()
    assert len(record["commit"]) == 40 or record["commit"] == "unknown"
    assert "seed" not in provenance(None, num_threads=2) and provenance(None, num_threads=2)["weights_sha256"] is None


def test_cpu_info_reads_the_model_name_and_native_bf16_from_cpuinfo():
    # two processors, as /proc/cpuinfo lists them: the first model name is kept
    amd = "processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2 fma\n\nprocessor\t: 1\nmodel name\t: other\n"
    assert cpu_info(amd) == {"model": "AMD EPYC", "bf16": False}
    intel = "model name\t: Intel(R) Xeon(R)\nflags\t\t: avx2 avx512f avx512_bf16 amx_tile\n"
    assert cpu_info(intel) == {"model": "Intel(R) Xeon(R)", "bf16": True}
    assert cpu_info("flags\t: amx_bf16\n") == {"model": "unknown", "bf16": True}
    assert cpu_info("") == {"model": "unknown", "bf16": False}


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


def test_a_study_on_a_cpu_without_native_bf16_says_so_once(monkeypatch):
    import trl_rlvr_ext.provenance as provenance_module
    from lab.studies import runner

    for bf16, expected in ((False, 1), (True, 0), (None, 0)):  # unknown (not Linux): nothing is claimed
        lines = []
        monkeypatch.setattr(provenance_module, "cpu_info", lambda bf16=bf16: {"model": "AMD EPYC", "bf16": bf16})
        runner._note_slow_bf16("pretrained", lines.append)
        assert len(lines) == expected
    monkeypatch.setattr(provenance_module, "cpu_info", lambda: {"model": "AMD EPYC", "bf16": False})
    lines = []
    runner._note_slow_bf16("pretrained", lines.append)
    assert lines[0].startswith("[pretrained] note: this CPU (AMD EPYC) has no native bf16")
