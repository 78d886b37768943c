"""Where results are recorded: the MLflow tracker of a run, the sweep callback (one parent run per
multirun), the environment a run ran in, and the GPU sampler."""
