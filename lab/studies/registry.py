"""The registry of studies and their pages: a study's name -> the package (of `lab.studies`) whose
``make_study()`` builds its `Study` and whose ``pages`` module declares its evidence `Page` (``PAGE``).

The packages are named here as strings and imported only when a study or page is asked for, so that the engine
imports no study and ``python -m lab study --help`` stays light. A new study is a package with those two names and a
line here.
"""

import importlib


# name -> the study's package, in the order the evidence index lists them
STUDIES = {
    "self": "self_study",
    "nsr": "nsr_study",
    "is_dpo": "is_dpo_study",
    "lora_init": "lora_init_study",
    "pretrained": "pretrained_study",
}


def _package(name: str):
    if name not in STUDIES:
        raise ValueError(f"Unknown study {name!r}. Choose one of {sorted(STUDIES)}.")
    return importlib.import_module(f"{__package__}.{STUDIES[name]}")


def get_study(name: str):
    """The `Study` called ``name`` (one of `STUDIES`)."""
    return _package(name).make_study()


def get_page(name: str):
    """The evidence `Page` of the study called ``name`` (one of `STUDIES`)."""
    _package(name)
    return importlib.import_module(f"{__package__}.{STUDIES[name]}.pages").PAGE


def get_pages() -> dict:
    """Every study's `Page`, by study name, in the order of `STUDIES`."""
    return {name: get_page(name) for name in STUDIES}
