"""The one data layer: every entry point resolves dataset and model names through `trl_rlvr_ext.data`."""

import json

import pytest

from trl_rlvr_ext.data import (
    FILE_BUILDERS,
    TOY_DATASETS,
    check_dataset_name,
    check_model_name,
    load_dataset_dict,
    load_split,
)


def test_toy_names_resolve_offline():
    splits = load_dataset_dict("toy:arithmetic")
    assert {"train", "test"} <= set(splits) and "prompt" in splits["test"].column_names
    assert load_split("toy:arithmetic", "test").num_rows == splits["test"].num_rows
    with pytest.raises(ValueError, match="toy:arithmetic"):
        check_dataset_name("toy:arithmetc")
    with pytest.raises(ValueError, match="toy:base"):
        check_model_name("toy:bse")


@pytest.mark.parametrize("extension", sorted(set(FILE_BUILDERS) - {".arrow"}))
def test_every_file_type_is_read_whole_as_one_split(tmp_path, extension):
    from datasets import Dataset

    data = Dataset.from_dict({"prompt": ["1+1=", "2+2="], "answer": ["2", "4"]})
    path = tmp_path / f"problems{extension}"
    {
        ".json": lambda p: data.to_json(p),
        ".jsonl": lambda p: data.to_json(p),
        ".csv": lambda p: data.to_csv(p),
        ".parquet": lambda p: data.to_parquet(p),
    }[extension](str(path))
    loaded = load_split(str(path), split="test")  # a file is one split, whatever split is asked for
    assert [str(a) for a in loaded["answer"]] == ["2", "4"]  # csv infers ints


def test_save_to_disk_folders_and_their_splits(tmp_path):
    from datasets import Dataset, DatasetDict

    data = Dataset.from_dict({"prompt": ["a"], "answer": ["1"]})
    DatasetDict({"test": data}).save_to_disk(str(tmp_path / "dd"))
    data.save_to_disk(str(tmp_path / "d"))
    assert load_split(str(tmp_path / "dd"), "test")["answer"] == ["1"]
    assert load_split(str(tmp_path / "d"), "anything")["answer"] == ["1"]
    with pytest.raises(ValueError, match="has splits"):
        load_split(str(tmp_path / "dd"), "train")


@pytest.mark.parametrize("name", ["missing.jsonl", "./data/problems", "/no/such/folder/x", "a/b/c"])
def test_a_missing_local_dataset_is_an_error_naming_the_path_not_a_hub_lookup(name):
    with pytest.raises(FileNotFoundError, match="No such dataset file or folder"):
        check_dataset_name(name)
    with pytest.raises(FileNotFoundError):
        load_dataset_dict(name)


def test_a_missing_local_model_is_an_error_naming_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "nope")):
        check_model_name(str(tmp_path / "nope"))
    (tmp_path / "config.json").write_text(json.dumps({}))
    with pytest.raises(ValueError, match="is a file"):
        check_model_name(str(tmp_path / "config.json"))
    check_model_name(str(tmp_path))
    check_model_name("Qwen/Qwen2.5-Math-1.5B")  # a hub id is left to the hub


def test_unreadable_file_types_say_which_types_work(tmp_path):
    path = tmp_path / "problems.txt"
    path.write_text("1+1=")
    with pytest.raises(ValueError, match=r"\.jsonl"):
        check_dataset_name(str(path))


def test_every_toy_dataset_is_documented():
    assert set(TOY_DATASETS) == {"toy:arithmetic", "toy:preference"}
