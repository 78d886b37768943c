"""The lists of registered names in README.md and docs/*.md (issue 41 §4) are generated, never
written by hand: each sits between `<!-- names: SOURCE -->` and `<!-- /names -->`, where SOURCE is
a config key that bench.registries checks (its table's names, in the table's order) or a config
group (conf/<group>/*.yaml, sorted, as a refusal lists them). A new format, backend, model,
preset or scenario is then in every list at once; after adding one, regenerate the lists with

    python tests/unit/test_doc_lists.py

(this test says so when they are stale, naming the files)."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import List

ROOT = Path(__file__).resolve().parents[2]
MARKED = re.compile(r"<!-- names: ([\w.]+) -->(.*?)<!-- /names -->")
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def names(source: str) -> List[str]:
    from bench.registries import KEYS

    if source in KEYS:
        return list(KEYS[source])
    return sorted(path.stem for path in (ROOT / "conf" / source).glob("*.yaml"))


def generated(text: str) -> str:
    """`text` with each marked list written anew from its source."""

    def listed(marked: re.Match) -> str:
        return f"<!-- names: {marked[1]} -->{', '.join(f'`{name}`' for name in names(marked[1]))}<!-- /names -->"

    return MARKED.sub(listed, text)


def test_every_list_of_registered_names_in_the_docs_is_generated_from_its_source():
    stale = [str(path.relative_to(ROOT)) for path in DOCS if generated(path.read_text()) != path.read_text()]
    assert not stale, f"stale name lists in {', '.join(stale)}: run python tests/unit/test_doc_lists.py"


def test_the_lists_are_marked_where_the_names_are_given():
    """Where a user reads the names: the README's and docs/configuration.md's group tables (the
    README's presets: `python -m bench --help experiment`), the formats in docs/storage.md. Each
    marker names a source that has names."""
    marked = {path.name: {source for source, _ in MARKED.findall(path.read_text())} for path in DOCS}
    groups = {"scenario", "model", "data.name", "storage.name", "storage.workload.format"}
    assert groups <= marked["README.md"]
    assert groups | {"storage.client", "experiment"} <= marked["configuration.md"]
    assert "storage.workload.format" in marked["storage.md"]
    for source in set().union(*marked.values()):
        assert names(source), f"<!-- names: {source} --> names neither a bench.registries key nor a conf group"
    assert "`tfrecord`" in generated("<!-- names: storage.workload.format --><!-- /names -->")


if __name__ == "__main__":  # regenerate
    sys.path.insert(0, str(ROOT))
    for doc in DOCS:
        if generated(doc.read_text()) != doc.read_text():
            doc.write_text(generated(doc.read_text()))
            print(f"rewrote the name lists in {doc.relative_to(ROOT)}")
