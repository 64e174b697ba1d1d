"""The command lines of the package, one module each, as TRL's ``trl/scripts``: ``trl-rlvr-ext <command>`` runs
``python -m trl_rlvr_ext.scripts.<module>``. grpo, dpo (training from a recipe; `launch` holds their shared launcher),
eval, curate, score_behavior, demo and recipes. Library modules never import from here."""
