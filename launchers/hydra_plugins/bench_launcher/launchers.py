"""The launchers the presets conf/hydra/launcher/slurm.yaml and slurm_local.yaml name; what they
do is in bench.slurm. Hydra imports every hydra_plugins module when it starts: without
hydra-submitit-launcher (pip install "bench[slurm]") this defines nothing, and the presets say
in one line what is missing."""

try:
    from bench.slurm import SweepLauncher
except ModuleNotFoundError as missing:
    if not (missing.name or "").startswith(("hydra_plugins.hydra_submitit_launcher", "submitit")):
        raise
    SweepLauncher = None

if SweepLauncher is not None:

    class SlurmLauncher(SweepLauncher):
        _EXECUTOR = "slurm"
        cluster = "Slurm"

    class LocalLauncher(SweepLauncher):
        _EXECUTOR = "local"
        cluster = "local"
        one_at_a_time = True
