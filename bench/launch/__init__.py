"""How a run's processes start and cooperate: logs, process group, the hang watchdog, the
elastic launcher and its reaper (who a process is among the ranks: bench.rank_context).

`bench.launch.launchers.select_launcher` is the one place that decides how a run's ranks start:
- in this process: a one-process run (distributed=single, or ddp with one process outside a
  sweep, or in a Slurm / slurm_local job: a process submitit started for that job alone), and
  every scenario that has no ranks (the storage benchmark);
- elastic workers: nproc_per_node x nnodes > 1, and every job of a multirun that runs in the
  sweep's own process (Hydra's basic launcher, the doctor's rungs), so each configuration runs in
  processes of its own: fresh allocator, fresh cuDNN autotune;
- joined: under torchrun / Slurm / Kubernetes (RANK, WORLD_SIZE, LOCAL_RANK set).
"""
