"""Where results are recorded: the MLflow tracker of a run, the sweep callback (one parent run per
multirun), and the environment a run ran in
(the GPU sampler is bench.machine.gpu_monitor; the sweep's Slurm launchers are bench.slurm)."""
