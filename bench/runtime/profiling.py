"""What a model run measures after its window, outside it, so none of it changes the window's
figures (`after_window`): a scenario's own pass (training's breakdown), the profiled steps and the
FLOPs count behind gflops_per_image and MFU (rank 0, once per run). A SIGTERM / Ctrl-C during these
passes of a single-process run is noted, not raised: the pass ends after the step in progress and
the run reports the window it already measured, then ends KILLED (bench.app). A DDP rank keeps the
old way (the signal ends the job): its ranks must run the same steps, and each would see the
signal at a different one.

profile.enabled: torch.profiler over `profile.steps` steps AFTER the measured window (the
window's figures never include the profiler's cost).

Every rank runs the same number of steps (DDP's collectives must match), and rank 0 records:
one unrecorded profiler warm-up step, then `profile.steps` recorded ones, CPU activity plus CUDA
on a GPU. It writes, each whole or not at all:
- trace_rank0.json: the Chrome trace (open it in https://ui.perfetto.dev or chrome://tracing);
- profile_top_ops.txt: torch's key-averages table of the recorded steps, the top
  `profile.row_limit` operators by self device (CUDA) time, by self CPU time without a GPU.
The report logs both to MLflow as artifacts. (On a machine without CUDA, the profiler's C++
side prints a few lines of its own on stderr.)

FLOPs per image, counted once per run by torch.utils.flop_counter.FlopCounterMode (no
hand-written counts).

Convention: FlopCounterMode counts a multiply-add as 2 FLOPs and counts convolutions and matrix
products (the model FLOPs of MFU), not element-wise ops. ResNet-50 at 224x224 is 8.18 GFLOPs
forward here, the "4.1 GFLOPs" torchvision and timm print, which are multiply-adds (GMACs).
A training step (forward + backward) is about 3x the forward: ResNet-50 24.3 GFLOPs per image
(the backward of the first convolution computes no input gradient, hence a little under 3x).

The model is built on the meta device (shapes only, no memory, no compute), so counting costs
well under a second even for large models; a model that cannot be built there is counted on a
CPU batch of two instead. A model that cannot be counted at all gives no figures (absent).
"""

from __future__ import annotations

import logging
import signal
from contextlib import nullcontext
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
from torch.profiler import ProfilerActivity, profile, schedule
from torch.utils.flop_counter import FlopCounterMode, conv_flop_count

from bench.config import BenchConfig
from bench.config.schema import ModelConfig
from bench.machine.writable import write_whole
from bench.rank_context import RankContext
from bench.results import write_text
from bench.runtime.models import build_model
from bench.runtime.timing import SignalFlag

log = logging.getLogger(__name__)

TRACE_FILE, TABLE_FILE = "trace_rank0.json", "profile_top_ops.txt"


def profile_steps(
    run_step: Callable[[], object],
    steps: int,
    device: torch.device,
    out_dir: Path,
    record: bool,
    row_limit: int = 30,
    stop: Optional[Callable[[], bool]] = None,
) -> List[Path]:
    """Run `steps` + 1 steps; with `record` (rank 0) profile them and write the two files; their paths.
    `stop()` true (a signal was noted) ends the pass after the step in progress, writing nothing:
    a cut trace is not the profile asked for, and the run must end promptly."""
    stop = stop or (lambda: False)
    log.info("profiling started: %d steps after the window", steps)
    cuda = device.type == "cuda"
    written: List[Path] = []

    def on_ready(prof: profile) -> None:
        if stop():
            return
        trace = out_dir / TRACE_FILE
        write_whole(trace, lambda tmp: prof.export_chrome_trace(str(tmp)))
        sort_by = "self_device_time_total" if cuda else "self_cpu_time_total"
        header = (
            f"torch.profiler: {steps} steps after the measured window, rank 0, on {device}; "
            f"top {row_limit} operators by {'self device (CUDA)' if cuda else 'self CPU'} time\n\n"
        )
        table = prof.key_averages().table(sort_by=sort_by, row_limit=row_limit)
        written.extend([trace, write_text(out_dir / TABLE_FILE, header + table + "\n")])

    if record:  # rank 0; the other ranks run the same steps unrecorded
        out_dir.mkdir(parents=True, exist_ok=True)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    every = schedule(wait=0, warmup=1, active=steps, repeat=1)
    with profile(activities=activities, schedule=every, on_trace_ready=on_ready) if record else nullcontext() as prof:
        for _ in range(steps + 1):
            if stop():
                break
            run_step()
            if prof is not None:
                if cuda:
                    torch.cuda.synchronize(device)
                prof.step()
    if written:
        log.info("profiled %d steps: %s", steps, ", ".join(str(p) for p in written))
    return written


def after_window(
    config: BenchConfig,
    device: torch.device,
    ctx: RankContext,
    run_step: Callable[[], object],
    out_dir: Optional[Path],
    backward: bool,
    first: Optional[Callable[[Callable[[], bool]], Dict[str, Any]]] = None,
) -> Tuple[Dict[str, Any], List[str], Optional[str]]:
    """(figures, files written, the signal that cut the passes short or None) of the passes this run
    asked for: `first(stop)` (the scenario's own pass, its figures), the profiled steps of `run_step`,
    then rank 0's FLOPs per image (`backward`: a training step's too)."""
    files: List[Path] = []
    with SignalFlag(not ctx.distributed and (first is not None or config.profile.enabled)) as flag:
        stop = lambda: flag.signum is not None  # noqa: E731
        figures = dict(first(stop)) if first is not None else {}
        if config.profile.enabled and not stop():
            files = profile_steps(
                run_step,
                config.profile.steps,
                device,
                out_dir or Path.cwd(),
                record=ctx.is_reporter,
                row_limit=config.profile.row_limit,
                stop=stop,
            )
    if ctx.is_reporter:
        figures.update(flops_per_image(config.model, config.data.image_size, backward))
    interrupted = signal.Signals(flag.signum).name if flag.signum is not None else None
    return figures, [str(path) for path in files], interrupted


BATCH = 2  # not 1: BatchNorm in training mode needs two values per channel (a 1x1 map at small sizes)


def conv_backward_flop(grad_out_shape: Any, x_shape: Any, w_shape: Any, *args: Any, **_kwargs: Any) -> int:
    """Each gradient of a convolution (input, weight) costs what its forward costs. torch's own
    formula counts the weight gradient of a grouped convolution as if it were not grouped: a
    depthwise conv's backward came out `groups` times too high (EfficientNet-B0 fwd+bwd 32 GFLOPs
    for a 0.77 GFLOPs forward)."""
    # aten.convolution_backward's arguments after the weight: bias sizes, stride, padding, dilation,
    # transposed (args[4]), output padding, groups, output_mask (args[7]: which gradients it computes)
    transposed, output_mask = args[4], args[7]
    forward = conv_flop_count(list(x_shape), list(w_shape), list(grad_out_shape), transposed)
    return forward * (int(bool(output_mask[0])) + int(bool(output_mask[1])))


CORRECTED = {torch.ops.aten.convolution_backward: conv_backward_flop}


def _count(model_cfg: ModelConfig, image_size: int, device: torch.device, backward: bool) -> Dict[str, float]:
    """The figures of flops_per_image from one pass: the total read between the forward and the
    backward is the forward's, the same count as an eval-mode forward of its own (the counted ops,
    matmuls and convolutions, are the same in both modes), so one model and one pass, not two."""
    with device:
        model = build_model(model_cfg)
    model.train(backward)
    images = torch.randn(BATCH, 3, image_size, image_size, device=device)
    with FlopCounterMode(display=False, custom_mapping=CORRECTED) as counter, torch.set_grad_enabled(backward):
        out = model(images)
        figures = {"gflops_per_image_forward": int(counter.get_total_flops()) // BATCH / 1e9}
        if backward:
            out.float().sum().backward()
            figures["gflops_per_image_fwd_bwd"] = int(counter.get_total_flops()) // BATCH / 1e9
    return figures


def flops_per_image(model_cfg: ModelConfig, image_size: int, backward: bool = True) -> Dict[str, float]:
    """gflops_per_image_forward and (backward=True) gflops_per_image_fwd_bwd, in 1e9 FLOPs."""
    for device in (torch.device("meta"), torch.device("cpu")):
        try:
            return _count(model_cfg, image_size, device, backward)
        except Exception as exc:  # a model the meta device cannot run: try a real batch
            log.debug("FLOPs of %s on %s failed: %s: %s", model_cfg.arch, device, type(exc).__name__, exc)
    log.warning("could not count the FLOPs of model %s: gflops_per_image and MFU are absent", model_cfg.arch)
    return {}
