"""Trainers (SPEC §6): each one file you can read top to bottom, config in, artifacts out.
The models they train are in `worker/models/`; the service plugs in through `TrainerCallbacks`
(progress, stop requests, checkpoints)."""
