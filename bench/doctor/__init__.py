"""`python -m bench.doctor`: why is this training job slow? The bottleneck ladder.

It takes the overrides of a training run and measures, briefly and in order: the compute ceiling
(the same model, batch and precision on synthetic on-device data), the input pipeline alone (the
configured loader with no model, its CPU time split by stage), the storage alone (the files under
data.root read in the loader's order), the full run, and with DDP an all-reduce of the gradients'
size alone. Then one sentence names the limit with its figures, and what-ifs are measured, not
guessed. Each rung is a child MLflow run under one parent; doctor.md/.html/.png/.json on disk.

    cli.py         the command: its keys, the ladder's run, its MLflow record (a parent, a child per rung);
                   its outputs: the table, the bar chart, the HTML page
    ladder.py      the rungs, in order, within the budget (the rungs: .training, .loader, .storage_read,
                   and its own all-reduce); then the what-ifs worth measuring, and their runs
    verdict.py     the sentence, from the rungs' figures         (pure: unit-tested)
    figures.py     Rung, WhatIf, Diagnosis and each rung's own figures (doctor.json is their serialisation)
"""
