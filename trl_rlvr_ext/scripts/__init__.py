"""The command lines of the package, one module each, as TRL's ``trl/scripts``: ``trl-rlvr-ext <command>`` runs
``python -m trl_rlvr_ext.scripts.<module>``. grpo, dpo (training from a recipe; `launch` holds their shared launcher),
eval, curate, score_behavior, demo and recipes. Library modules never import from here."""

from .._compat import hold_bitsandbytes_kernel_notice


# The commands are an application, so they (not the library: importing `trl_rlvr_ext` changes no other library's
# logging) decide what their users see: peft imports bitsandbytes whenever it is installed, and its notice about the
# optional 4-bit CPU kernel (with `kernels`' offline notice for that kernel) concerns 4-bit models only. It is held
# from the first import of a command module, before any of them imports TRL/peft, and replayed when a command is asked
# for a 4-bit model (`launch.parse`).
hold_bitsandbytes_kernel_notice()
