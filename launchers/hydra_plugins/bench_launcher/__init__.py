"""bench's Hydra launchers (hydra/launcher=slurm, hydra/launcher=slurm_local) live in
hydra_plugins.bench_launcher.launchers: Hydra instantiates launchers from the hydra_plugins
namespace only. The code is bench.slurm."""
