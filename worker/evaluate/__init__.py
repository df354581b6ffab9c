"""Evaluation (SPEC §7): policies, candidate scoring, scorecards, samples.

- `policies`: the policy interface and loaders (trm, untrained trm, qlora adapter, base LM).
- `lm_scoring`: log-likelihood candidate scoring for causal LMs (one forward pass per batch of
  rows; a prompt's keys/values shared by its candidates).
- `samples`: one sample per example, cached by model hash in the run directories; `scorecard`:
  scores and intervals.
- `rollouts`: failure/recovery rates from rollouts in the anchor worlds.
- `anchors`: `evaluate_policy`, a policy scored on a train sample and the anchors (the train
  kind's `evaluate` stage and the bench kind, both in worker/kinds/, use it).
"""
