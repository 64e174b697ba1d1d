"""`trl_rlvr_ext.data`: one resolution of model and dataset names for the scripts, the evaluation and the curation."""

import pytest
from datasets import Dataset, DatasetDict

from trl_rlvr_ext import data
from trl_rlvr_ext.evaluation.data import load_problems
from trl_rlvr_ext.scripts import utils


ROWS = {"prompt": ["1+1=", "2+2=", "3+3="], "answer": ["2", "4", "6"]}


def _write(dataset: Dataset, path):
    suffix = path.suffix
    if suffix in (".json", ".jsonl"):
        dataset.to_json(str(path))
    elif suffix == ".csv":
        dataset.to_csv(str(path), index=False)
    elif suffix == ".parquet":
        dataset.to_parquet(str(path))
    elif suffix == ".arrow":  # the file `save_to_disk` writes
        dataset.save_to_disk(str(path.parent / "saved"))
        (arrow,) = (path.parent / "saved").glob("*.arrow")
        arrow.rename(path)
    return str(path)


@pytest.mark.parametrize("extension", sorted(data.DATA_FILE_BUILDERS))
def test_every_file_type_loads_the_same_in_every_loader(extension, tmp_path):
    path = _write(Dataset.from_dict(ROWS), tmp_path / f"problems{extension}")
    for loaded in (data.load_named_dataset(path)["train"], data.load_split(path, None), load_problems(path)):
        assert loaded["prompt"] == ROWS["prompt"] and [str(a) for a in loaded["answer"]] == ROWS["answer"]
    assert len(data.load_split(path, "train")) == len(ROWS["prompt"])
    # A single file has no test split: asking for one is refused, never answered with the whole file
    with pytest.raises(ValueError, match=r"is a single data file: it has no 'test' split.*Leave --split out"):
        data.load_split(path, "test")


def test_saved_folders_and_splits(tmp_path):
    DatasetDict({"train": Dataset.from_dict(ROWS), "test": Dataset.from_dict(ROWS).select([0])}).save_to_disk(
        str(tmp_path / "dict")
    )
    Dataset.from_dict(ROWS).save_to_disk(str(tmp_path / "single"))
    assert len(data.load_split(str(tmp_path / "dict"), "test")) == 1
    assert len(data.load_split(str(tmp_path / "dict"), None)) == 1  # the test split by default
    assert len(data.load_split(str(tmp_path / "single"), None)) == 3
    with pytest.raises(ValueError, match="is a folder holding one saved Dataset: it has no 'whatever' split"):
        data.load_split(str(tmp_path / "single"), "whatever")
    assert len(data.load_named_dataset(str(tmp_path / "single"))) == 3
    with pytest.raises(ValueError, match=r"has the splits \['train', 'test'\], not 'dev'"):
        data.load_split(str(tmp_path / "dict"), "dev")


def test_toy_names(tmp_path):
    assert set(data.load_named_dataset("toy:arithmetic")) == {"train", "test"}
    assert "chosen" in data.load_split("toy:preference", "train").column_names
    with pytest.raises(ValueError, match="Unknown toy dataset 'toy:nope'"):
        data.load_split("toy:nope", "train")
    with pytest.raises(ValueError, match="Unknown toy model"):
        data.check_model_name_or_path("toy:huge")
    data.check_model_name_or_path("toy:tiny")  # known names need nothing on disk yet


def test_toy_names_take_the_digit_range():
    splits = data.load_named_dataset("toy:arithmetic?min_digits=9&max_digits=9")
    assert {len(row["prompt"]) for row in splits["test"]} == {len("123456789+123456789=")}
    assert data.parse_toy_name("toy:base?max_digits=4") == ("toy:base", {"max_digits": 4})
    data.check_model_name_or_path("toy:base?max_digits=4")
    data.check_dataset_name("toy:arithmetic?min_digits=1&max_digits=1")
    for name, match in [
        ("toy:arithmetic?digits=9", "keys \\['min_digits', 'max_digits'\\]"),
        ("toy:arithmetic?max_digits=x", "must be a positive integer"),
        ("toy:arithmetic?max_digits=10", "at most 9"),
        ("toy:tiny?max_digits=3", "takes no options"),
        ("toy:preference?max_digits=3", "takes no options"),
    ]:
        with pytest.raises(ValueError, match=match):
            data.check_dataset_name(name) if "tiny" not in name else data.check_model_name_or_path(name)


def test_missing_local_paths_are_named_not_looked_up_on_the_hub(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"No such data file: 'problems.jsonl'"):
        data.load_split("problems.jsonl", "train")
    with pytest.raises(FileNotFoundError, match=r"'data/a/b': no such file or directory.*not a hub id"):
        data.load_named_dataset("data/a/b")
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(ValueError, match="Cannot read 'notes.txt'"):
        data.load_split("notes.txt", "train")
    with pytest.raises(FileNotFoundError, match="no such directory.*not a hub id"):
        data.check_model_name_or_path("./outputs/run")


def test_the_scripts_use_the_same_names():
    assert utils.resolve_model_name_or_path is data.resolve_model_name_or_path
    assert utils.load_named_dataset is data.load_named_dataset and utils.TOY_DATASETS is data.TOY_DATASETS
