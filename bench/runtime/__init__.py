"""The model runtime that the training and the inference scenarios share; neither scenario imports the
other (tests/unit/test_layout.py). What runs a model on a device: models (build, check, compile),
precision (autocast, scaler, TF32, channels_last), device (policy, threads, peak memory), epoch_data
(the batches, epoch by epoch), timing (the step clock; a signal noted, not raised, mid-step),
profiling (torch.profiler after the window, GFLOPs per image), reporting (the records' shared parts;
datasheet TFLOP/s, MFU), and scenario (the base class of both scenarios: preflight, what every run
of a model must have before it starts, the out-of-memory line, the GPU monitor and the
fit-to-measure watch of the window; the verdict's place in the record is reporting's).
The machine itself (fitness, CPU facts, NVML, child
processes) is bench.machine, under it."""
