"""Using a trained controller (SPEC §7's policy, served): `controller` answers batches of rows with
an action, the scores as probabilities, the margin and whether the controller abstains; `export`
writes a trained controller as a folder that decides without the service and without torch."""
