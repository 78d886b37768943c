"""The machine a run is on, below every scenario: fit to measure (fitness, with the CPUs' facts, and
gpu_monitor's NVML checks), the GPU monitor (NVML: utilisation, memory, energy) and child processes
(children: run_child, sigterm_raises). Imports nothing of bench's but bench.errors."""
