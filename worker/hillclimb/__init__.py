"""The hill-climb over the generalization ladder (SPEC §8).

`ladder` says what each rung does to the data, `mutate` proposes the next candidate around the
best, `decide` is the keep rule and the rung moves, `ledger` is the search's only memory, `search`
coordinates candidates (child `train` runs), `stages` plugs it into the runner.
"""
