"""bench's size as issue 35 counts it: the lines of Python code in bench/, without blank lines,
comments and docstrings (every line a token other than a comment or a docstring stands on).

    python tests/code_lines.py            # the total and the modules, then each package's share
"""

from __future__ import annotations

import ast
import functools
import io
import tokenize
from collections import Counter
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"
NOT_CODE = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}


def code_lines(path: Path) -> int:
    return _code_lines(path.read_text())


@functools.lru_cache(maxsize=None)  # the layout tests count each module, then the whole of bench
def _code_lines(source: str) -> int:
    docstrings = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            value = first.value if isinstance(first, ast.Expr) else None
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                docstrings.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    lines = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in NOT_CODE:
            lines.update(n for n in range(token.start[0], token.end[0] + 1) if n not in docstrings)
    return len(lines)


def count(root: Path = BENCH) -> Counter:
    """Code lines per package (a top-level module counts as `bench`)."""
    per: Counter = Counter()
    for path in root.rglob("*.py"):
        parts = path.relative_to(root).parts
        per["bench" if len(parts) == 1 else f"bench.{parts[0]}"] += code_lines(path)
    return per


def main() -> None:
    per = count()
    modules = sum(1 for _ in BENCH.rglob("*.py"))
    print(f"bench: {sum(per.values())} code lines in {modules} modules")
    for package, lines in per.most_common():
        print(f"  {lines:6d}  {package}")


if __name__ == "__main__":
    main()
