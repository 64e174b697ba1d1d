"""The lab's command line, run from a clone at the repository root: it only dispatches; each command is a module
of `lab.scripts` with ``cli_main(argv)``.

    python -m lab study self --quick --tasks toy          # run (or resume) a study
    python -m lab study report all --check                # every evidence page equals what its records render
    python -m lab baselines --records docs/evidence/data --out docs/evidence/data/trivial.jsonl
    python -m lab screen --render                         # the screening page from its records
    python -m lab real-model-demo                         # the real-model demo's page from its records

The records keep the commands as they were typed: a recorded ``trl-rlvr-ext study ...``, ``trl-rlvr-ext baselines
...`` or ``trl-rlvr-ext screen ...`` reruns from a clone as ``python -m lab study ...`` (``baselines``, ``screen``)
with the same arguments, and ``trl-rlvr-ext demo --render`` is ``python -m lab real-model-demo``. An error of the
package's own checks prints as one line; ``--debug`` shows its traceback (`trl_rlvr_ext.cli.dispatch`).
"""

from trl_rlvr_ext.cli import dispatch


PROG = "python -m lab"

# command -> (module of lab.scripts with cli_main(argv), one-line help)
COMMANDS = {
    "study": ("study", "run a study (arms x seeds, Pass@k table and plots), render or check its evidence page"),
    "baselines": ("study_baselines", "trivial-policy baselines (guesses from the prompt) of studies' evaluation sets"),
    "screen": ("screen_tasks", "screen tasks for a model's learnable regime (base vs trivial pass@k), rendered page"),
    "real-model-demo": ("real_model_demo", "render the real-model demo's page from its records"),
}


def main(argv: list[str] | None = None) -> int:
    return dispatch(argv, PROG, COMMANDS, "lab.scripts")


if __name__ == "__main__":
    raise SystemExit(main())
