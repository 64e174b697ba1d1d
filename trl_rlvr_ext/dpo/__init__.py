"""IS-DPO: TRL's DPOTrainer with importance-sampled direct alignment (https://huggingface.co/papers/2506.08681).

Import the public names from the package root (``from trl_rlvr_ext import ISDPOConfig, ISDPOTrainer``); the scorer
for behaviour log-probs is ``trl_rlvr_ext.dpo.behavior.score_behavior_logps``.
"""
