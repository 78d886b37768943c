"""The oldest versions pyproject declares, as pip requirements for the compatibility pass
(`python .ci/floors.py` prints them one a line; `--python` prints the oldest Python)."""

import re
import sys
from pathlib import Path

import tomllib

# the packages whose declared floor the pass proves (the rest resolve as pip chooses)
PROVED = ("torch", "torchvision", "hydra-core", "omegaconf", "mlflow")

project = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"]
if sys.argv[1:] == ["--python"]:
    print(re.fullmatch(r">=\s*(\d+\.\d+)", project["requires-python"]).group(1))
    raise SystemExit
for requirement in project["dependencies"]:
    found = re.match(r"([A-Za-z0-9_.-]+)\s*>=\s*([0-9][0-9.]*)", requirement)
    if found and found.group(1).lower() in PROVED:
        print(f"{found.group(1)}=={found.group(2)}")
