"""bench: Hydra-composed training-speed and storage-I/O benchmarks, logged to MLflow.

Kept import-light on purpose: `python -m bench --cfg job` and `--help` must not pull in
torch or mlflow.
"""

from pathlib import Path

__version__ = "0.1.0"


def config_dir() -> str:
    """The Hydra config root: bench/conf inside an installed wheel, else the checkout's conf/."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "conf", here.parent / "conf"):
        if (candidate / "config.yaml").is_file():
            return str(candidate)
    raise FileNotFoundError(f"bench's config directory (conf/config.yaml) was not found next to {here}")
