"""bench's Hydra launchers by name. hydra/launcher=slurm|slurm_local name classes of
hydra_plugins.bench_launcher (shipped from launchers/hydra_plugins/). Hydra finds plugins by
walking the folders of the hydra_plugins namespace, which an editable install (pip install -e)
maps without a folder to walk, so they are registered by hand as well."""


def register_bench_launchers() -> None:
    from hydra.core.plugins import Plugins

    from hydra_plugins.bench_launcher import launchers

    for name in ("SlurmLauncher", "LocalLauncher"):  # absent without hydra-submitit-launcher
        if hasattr(launchers, name):
            Plugins.instance().register(getattr(launchers, name))
