"""The lab's commands (`lab.cli`): studies, trivial-policy baselines, task screening, the real-model demo's page."""
