"""Everything that computes: the arq worker, the stage runner, corpus, envs, trainers."""
