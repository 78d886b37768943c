"""Bad inputs (the table in bad_inputs.py), part 2: credentials on the command line, and what only
the machine, the device and the disk can tell (preflight)."""

from __future__ import annotations

import pytest
from bad_inputs import check_bad_input, ids, rows

TABLE = rows("S3 endpoint with a password", "radix flag misspelt")


@pytest.mark.parametrize("name, module, args, code, words", TABLE, ids=ids(TABLE))
def test_bad_input_is_one_line_and_no_run(bench, places, capfd, monkeypatch, name, module, args, code, words):
    check_bad_input(bench, places, name, module, args, code, words, capfd=capfd, monkeypatch=monkeypatch)
