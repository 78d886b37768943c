"""The lines of bench/ that some coverage run before a change executed and no run after it did (issue 42:
"coverage does not drop"). A total hides a run whose data file was lost at combine; this names lines.

    python .ci/coverage_lost.py BEFORE_ROOT BEFORE_JSON [...] --after AFTER_ROOT AFTER_JSON [...]

Each ROOT is the checkout a run measured, each JSON its `.coverage-run/coverage.json` (bash .ci/coverage);
several runs a side are united. Line numbers of a file that changed are mapped onto the first after
root's source through difflib's matching blocks (a line edited by the change counts as not there).
"""

from __future__ import annotations

import difflib
import json
import sys
from pathlib import Path
from typing import Dict, List, Set, Tuple


def executed(runs: List[Tuple[str, str]], target: Path) -> Dict[str, Set[int]]:
    """bench/ file -> the lines any of `runs` executed, numbered as in `target`'s copy of the file."""
    lines_of: Dict[str, Set[int]] = {}
    for root, data in runs:
        for path, measured in json.loads(Path(data).read_text())["files"].items():
            if not path.startswith("bench/") or not (target / path).exists():
                continue
            lines = set(measured["executed_lines"])
            source, now = (Path(root) / path).read_text().splitlines(), (target / path).read_text().splitlines()
            if source != now:
                moved = difflib.SequenceMatcher(a=source, b=now, autojunk=False).get_matching_blocks()
                to_now = {block.a + k + 1: block.b + k + 1 for block in moved for k in range(block.size)}
                lines = {to_now[n] for n in lines if n in to_now}
            lines_of.setdefault(path, set()).update(lines)
    return lines_of


def main(argv: List[str]) -> int:
    if "--after" not in argv or argv.index("--after") % 2 or len(argv) % 2 == 0:
        print(__doc__, file=sys.stderr)
        return 2
    at = argv.index("--after")
    before_runs, after_runs = (
        list(zip(argv[:at:2], argv[1:at:2], strict=True)),
        list(zip(argv[at + 1 :: 2], argv[at + 2 :: 2], strict=True)),
    )
    target = Path(after_runs[0][0])
    before, after = executed(before_runs, target), executed(after_runs, target)
    lost = 0
    for path in sorted(before):
        gone = sorted(before[path] - after.get(path, set()))
        lost += len(gone)
        source = (target / path).read_text().splitlines()
        for n in gone:
            print(f"{path}:{n}: {source[n - 1].strip()}")
    print(f"{lost} lines executed before and not after")
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
