"""FLOPs per image, counted once per run by torch.utils.flop_counter.FlopCounterMode (no
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
from typing import Dict

import torch
from torch.utils.flop_counter import FlopCounterMode, conv_flop_count

from bench.config.model import ModelConfig
from bench.runtime.models import build_model

log = logging.getLogger(__name__)

BATCH = 2  # not 1: BatchNorm in training mode needs two values per channel (a 1x1 map at small sizes)


def conv_backward_flop(
    grad_out_shape,
    x_shape,
    w_shape,
    _bias,
    _stride,
    _padding,
    _dilation,
    transposed,
    _output_padding,
    _groups,
    output_mask,
    out_shape=None,
    **_kwargs,
) -> int:
    """Each gradient of a convolution (input, weight) costs what its forward costs. torch's own
    formula counts the weight gradient of a grouped convolution as if it were not grouped: a
    depthwise conv's backward came out `groups` times too high (EfficientNet-B0 fwd+bwd 32 GFLOPs
    for a 0.77 GFLOPs forward)."""
    forward = conv_flop_count(list(x_shape), list(w_shape), list(grad_out_shape), transposed)
    return forward * (int(bool(output_mask[0])) + int(bool(output_mask[1])))


CORRECTED = {torch.ops.aten.convolution_backward: conv_backward_flop}


def _count(model_cfg: ModelConfig, image_size: int, device: torch.device, backward: bool) -> int:
    with device:
        model = build_model(model_cfg)
    model.train(backward)
    images = torch.randn(BATCH, 3, image_size, image_size, device=device)
    with FlopCounterMode(display=False, custom_mapping=CORRECTED) as counter, torch.set_grad_enabled(backward):
        out = model(images)
        if backward:
            out.float().sum().backward()
    return int(counter.get_total_flops()) // BATCH


def flops_per_image(model_cfg: ModelConfig, image_size: int, backward: bool = True) -> Dict[str, float]:
    """gflops_per_image_forward and (backward=True) gflops_per_image_fwd_bwd, in 1e9 FLOPs."""
    for device in (torch.device("meta"), torch.device("cpu")):
        try:
            figures = {"gflops_per_image_forward": _count(model_cfg, image_size, device, False) / 1e9}
            if backward:
                figures["gflops_per_image_fwd_bwd"] = _count(model_cfg, image_size, device, True) / 1e9
            return figures
        except Exception as exc:  # a model the meta device cannot run: try a real batch
            log.debug("FLOPs of %s on %s failed: %s: %s", model_cfg.arch, device, type(exc).__name__, exc)
    log.warning("could not count the FLOPs of model %s: gflops_per_image and MFU are absent", model_cfg.arch)
    return {}
