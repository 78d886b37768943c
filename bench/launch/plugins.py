"""bench's Hydra launchers by name. hydra/launcher=slurm|slurm_local name classes of
hydra_plugins.bench_launcher (shipped from launchers/hydra_plugins/). Hydra finds plugins by
walking the folders of the hydra_plugins namespace, which an editable install (pip install -e)
maps without a folder to walk, so they are registered by hand as well.

A launcher that hands jobs to a cluster needs the cluster's commands where the sweep starts:
cluster_commands_problem() says so in one sentence before the sweep opens anything (its MLflow
parent run included), instead of submitit's traceback from inside the launcher."""

from __future__ import annotations

import shutil
from typing import Any, Optional

# launcher class name -> the commands it runs in the submitting process (submitit's Slurm
# executor refuses to start without srun; sbatch submits, and is what a login node has)
CLUSTER_COMMANDS = {"SlurmLauncher": ("sbatch", "srun")}


def register_bench_launchers() -> None:
    from hydra.core.plugins import Plugins

    from hydra_plugins.bench_launcher import launchers

    for name in ("SlurmLauncher", "LocalLauncher"):  # absent without hydra-submitit-launcher
        if hasattr(launchers, name):
            Plugins.instance().register(getattr(launchers, name))


def cluster_commands_problem(config: Any) -> Optional[str]:
    """The sentence to refuse a sweep whose launcher's cluster commands are not on PATH, or None."""
    from omegaconf import OmegaConf

    target = str(OmegaConf.select(config, "hydra.launcher._target_", default="") or "")
    needed = CLUSTER_COMMANDS.get(target.rsplit(".", 1)[-1], ())
    missing = [command for command in needed if shutil.which(command) is None]
    if not missing:
        return None
    choice = OmegaConf.select(config, "hydra.runtime.choices", default={}).get("hydra/launcher") or target
    return (
        f"hydra/launcher={choice} needs Slurm's {' and '.join(needed)} on PATH; not found: {', '.join(missing)}. "
        "Use hydra/launcher=slurm_local to run the jobs through submitit's local executor, or run on a Slurm "
        "login node"
    )
