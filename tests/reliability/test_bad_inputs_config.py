"""Bad inputs (the table in bad_inputs.py), part 1: what Hydra rejects while composing, the values
the schema refuses, and the keys of training for accuracy."""

from __future__ import annotations

import pytest
from bad_inputs import check_bad_input, ids, rows

TABLE = rows("unknown model option", "S3 endpoint with a password")


@pytest.mark.parametrize("name, module, args, code, words", TABLE, ids=ids(TABLE))
def test_bad_input_is_one_line_and_no_run(bench, places, capfd, monkeypatch, name, module, args, code, words):
    check_bad_input(bench, places, name, module, args, code, words, capfd=capfd, monkeypatch=monkeypatch)


def test_a_config_files_yaml_error_or_misspelt_key_names_the_file_in_one_line(bench, tmp_path):
    """Issue 39 §12: a YAML syntax error in a --config-dir experiment was a 112-line traceback, exit 1,
    an empty outputs/<date>/<time> left; a misspelt key in a file said `data.batch_sise=None`."""
    experiments = tmp_path / "cfg" / "experiment"
    experiments.mkdir(parents=True)
    (experiments / "bad.yaml").write_text("# @package _global_\ndata:\n  batch_size: [8\n")
    (experiments / "typo.yaml").write_text("# @package _global_\ndata:\n  batch_sise: 8\n")
    said = {}
    for name in ("bad", "typo"):
        proc = bench.run("--config-dir", str(tmp_path / "cfg"), f"+experiment={name}", fresh=name == "bad")
        assert proc.returncode == 2, proc.stderr
        said[name] = bench.single_error(proc)
    assert said["bad"] == (
        f"[ERROR] {experiments / 'bad.yaml'}, line 3: not valid YAML (while parsing a flow sequence: expected ',' "
        "or ']', but got '<stream end>')"
    )
    assert said["typo"] == (
        "[ERROR] data.batch_sise=8 is not valid: accepted a key of data (did you mean data.batch_size?); "
        f"{experiments / 'typo.yaml'} sets it."
    )
    assert not (tmp_path / "outputs").exists()
