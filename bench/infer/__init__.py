"""The inference scenario (mode=inference): forward passes only, under torch.inference_mode, with
the training scenario's model, precision, channels_last, compile and data builders: images/s and
per-batch latency percentiles (bench.infer.loop; its report: bench.infer.scenario)."""
