"""Bad inputs (the table in bad_inputs.py), part 3: the other commands; and the table as a whole."""

from __future__ import annotations

import pytest
from bad_inputs import BAD_INPUTS, THROUGH_A_PROCESS, check_bad_input, ids, rows

TABLE = rows("radix flag misspelt")


def test_the_table_has_at_least_sixty_rows_and_each_runs_in_one_part():
    parts = (
        rows("unknown model option", "S3 endpoint with a password")
        + rows("S3 endpoint with a password", "radix flag misspelt")
        + TABLE
    )
    assert len(BAD_INPUTS) >= 60 and len(set(ids(BAD_INPUTS))) == len(BAD_INPUTS)
    assert ids(parts) == ids(BAD_INPUTS)


@pytest.mark.parametrize("name, module, args, code, words", TABLE, ids=ids(TABLE))
def test_bad_input_is_one_line_and_no_run(bench, places, capfd, monkeypatch, name, module, args, code, words):
    check_bad_input(bench, places, name, module, args, code, words, capfd=capfd, monkeypatch=monkeypatch)


PROCESS_ROWS = [row for row in BAD_INPUTS if row[0] in THROUGH_A_PROCESS]


def test_the_process_rows_are_rows_of_the_table():
    assert sorted(ids(PROCESS_ROWS)) == sorted(THROUGH_A_PROCESS)


@pytest.mark.parametrize("name, module, args, code, words", PROCESS_ROWS, ids=ids(PROCESS_ROWS))
def test_bad_input_through_a_real_process_is_one_line_and_no_run(bench, places, name, module, args, code, words):
    check_bad_input(bench, places, name, module, args, code, words)
