"""Evaluation (SPEC §7): policies, candidate scoring, scorecards, samples, the bench kind.

- `policies`: the policy interface and loaders (trm, untrained trm, qlora adapter, base LM).
- `lm_scoring`: log-likelihood candidate scoring for causal LMs (one forward pass per batch of
  rows; a prompt's keys/values shared by its candidates).
- `samples`: one sample per example, cached by model hash in the run directories; `scorecard`:
  scores and intervals.
- `rollouts`: failure/recovery rates from rollouts in the anchor worlds.
- `stage`: the `evaluate` stage of train runs; `bench`: the bench kind; `menu`: the bench menu.
"""
