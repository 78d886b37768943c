"""Lists the files git tracks (plus untracked, not ignored ones) that hold an unresolved merge-conflict
marker: a line that starts with seven '<', '=' or '>' and, for '<' and '>', a space or the line's end.
Exit 1 with one `path:line: marker` per hit, 0 when there is none. Run by the suite
(tests/unit/test_static_checks.py) and by pre-commit (.pre-commit-config.yaml)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Iterator, Tuple

ROOT = Path(__file__).resolve().parents[1]
# '=======' alone on its line; '<<<<<<< ' / '>>>>>>> ' followed by a branch name (or nothing)
MARKER = re.compile(rb"^(?:<{7}(?: |$)|={7}$|>{7}(?: |$)|\|{7}(?: |$))", re.M)


def checked_files(root: Path) -> Iterator[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        capture_output=True,
        check=True,
    ).stdout
    for name in filter(None, listed.split(b"\0")):
        path = root / name.decode()
        if path.is_file() and not path.is_symlink():
            yield path


def markers(root: Path = ROOT) -> Iterator[Tuple[Path, int, str]]:
    for path in checked_files(root):
        text = path.read_bytes()
        if b"\0" in text[:8192]:
            continue  # a binary file: its bytes are not lines
        for found in MARKER.finditer(text):
            line = text.count(b"\n", 0, found.start()) + 1
            yield path.relative_to(root), line, found.group().decode().strip()


if __name__ == "__main__":
    hits = list(markers())
    for path, line, marker in hits:
        print(f"{path}:{line}: unresolved merge-conflict marker {marker!r}")
    sys.exit(1 if hits else 0)
