"""Bad inputs (the table in bad_inputs.py), part 1: what Hydra rejects while composing, the values
the schema refuses, and the keys of training for accuracy."""

from __future__ import annotations

import pytest
from bad_inputs import check_bad_input, ids, rows

TABLE = rows("unknown model option", "S3 endpoint with a password")


@pytest.mark.parametrize("name, module, args, code, words", TABLE, ids=ids(TABLE))
def test_bad_input_is_one_line_and_no_run(bench, places, capfd, monkeypatch, name, module, args, code, words):
    check_bad_input(bench, places, name, module, args, code, words, capfd=capfd, monkeypatch=monkeypatch)
