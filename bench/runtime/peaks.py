"""Peak dense TFLOP/s per GPU model and precision, for MFU (model FLOPs utilisation).

Figures are the vendor's datasheet numbers WITHOUT structured sparsity (datasheets print the
sparse figure with a `*`; the dense one is half of it). `fp32` is the plain FP32 (CUDA-core)
figure, used when TF32 is off; `tf32` the TF32 tensor-core figure; `fp16` and `bf16` the
tensor-core figures that autocast uses. A GPU not in the table, a precision it has no figure
for, and every CPU get no peak: MFU is then absent, never guessed. Torch-free.

MFU = achieved model TFLOP/s per device (FLOPs per image counted by FlopCounterMode x images/s
per device) / this peak. FlopCounterMode counts convolutions and matrix products (2 FLOPs per
multiply-add), not element-wise ops, as MFU is usually defined.
"""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Tuple

# (pattern on torch.cuda.get_device_name, model, {precision: dense TFLOP/s}); first match wins. Each row's
# source is the comment above it: the vendor's datasheet and the figures it prints (* = with sparsity)
PEAKS: List[Tuple[str, str, Dict[str, float]]] = [
    # NVIDIA GH200 Grace Hopper datasheet (its H100-class GPU: FP32 67, TF32 989*, BF16/FP16 1,979*)
    (r"GH200", "GH200", {"fp32": 67.0, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5}),
    # NVIDIA H200 datasheet (H200 NVL column: FP32 60, TF32 835*, BF16/FP16 1,671*; * = with sparsity)
    (r"H200.*NVL", "H200 NVL", {"fp32": 60.0, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5}),
    # NVIDIA H200 datasheet (H200 SXM column: FP32 67, TF32 989*, BF16/FP16 1,979*)
    (r"H200", "H200 SXM", {"fp32": 67.0, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5}),
    # NVIDIA H100 datasheet (H100 NVL column: FP32 60, TF32 835*, BF16/FP16 1,671*)
    (r"H100.*NVL", "H100 NVL", {"fp32": 60.0, "tf32": 417.5, "bf16": 835.5, "fp16": 835.5}),
    # NVIDIA H100 datasheet (H100 PCIe column: FP32 51, TF32 756*, BF16/FP16 1,513*)
    (r"H100.*PCIe", "H100 PCIe", {"fp32": 51.0, "tf32": 378.0, "bf16": 756.5, "fp16": 756.5}),
    # NVIDIA H100 datasheet (H100 SXM column: FP32 67, TF32 989*, BF16/FP16 1,979*)
    (r"H100", "H100 SXM", {"fp32": 67.0, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5}),
    # NVIDIA A100 datasheet (40GB/80GB, PCIe and SXM: FP32 19.5, TF32 156, BF16/FP16 312; sparse x2)
    (r"A100", "A100", {"fp32": 19.5, "tf32": 156.0, "bf16": 312.0, "fp16": 312.0}),
    # NVIDIA L40S datasheet (FP32 91.6, TF32 183 | 366*, BF16/FP16 362.05 | 733*)
    (r"L40S", "L40S", {"fp32": 91.6, "tf32": 183.0, "bf16": 362.05, "fp16": 362.05}),
    # NVIDIA L4 datasheet (FP32 30.3, TF32 120*, BF16/FP16 242*)
    (r"\bL4\b", "L4", {"fp32": 30.3, "tf32": 60.0, "bf16": 121.0, "fp16": 121.0}),
    # NVIDIA A10 datasheet (FP32 31.2, TF32 62.5 | 125*, BF16/FP16 125 | 250*); not the A10G
    (r"\bA10\b", "A10", {"fp32": 31.2, "tf32": 62.5, "bf16": 125.0, "fp16": 125.0}),
    # NVIDIA V100 datasheet (V100S PCIe column: FP32 16.4, Tensor 130; no TF32 or BF16)
    (r"V100S", "V100S PCIe", {"fp32": 16.4, "fp16": 130.0}),
    # NVIDIA V100 datasheet (V100 PCIe column: FP32 14, Tensor 112)
    (r"V100.*PCIE", "V100 PCIe", {"fp32": 14.0, "fp16": 112.0}),
    # NVIDIA V100 datasheet (V100 SXM2 column: FP32 15.7, Tensor 125)
    (r"V100", "V100 SXM2", {"fp32": 15.7, "fp16": 125.0}),
    # NVIDIA T4 datasheet (FP32 8.1, mixed FP16/FP32 tensor 65; no TF32 or BF16)
    (r"\bT4\b", "T4", {"fp32": 8.1, "fp16": 65.0}),
]


def peak_key(autocast_dtype: str, tf32: bool) -> str:
    """The table's precision column for a run: autocast's dtype, else tf32 when it was on, else fp32."""
    return {"bfloat16": "bf16", "float16": "fp16"}.get(autocast_dtype, "tf32" if tf32 else "fp32")


def peak_tflops(device_name: str, precision: str) -> Optional[Tuple[float, str]]:
    """(dense TFLOP/s, GPU model) for this GPU and precision column; None when not known."""
    for pattern, model, figures in PEAKS:
        if re.search(pattern, device_name, flags=re.IGNORECASE):
            figure = figures.get(precision)
            return (figure, model) if figure is not None else None
    return None


def utilisation(
    gflops_per_image: Optional[float],
    images_per_second: float,
    world_size: int,
    device: str,
    device_name: str,
    autocast_dtype: str,
    tf32: bool,
) -> Dict[str, object]:
    """Achieved model TFLOP/s (all devices and per device) and, where the peak is known, MFU."""
    if not gflops_per_image or images_per_second <= 0:
        return {}
    achieved = images_per_second * gflops_per_image / 1000.0
    figures: Dict[str, object] = {"achieved_tflops": achieved, "achieved_tflops_per_device": achieved / world_size}
    known = peak_tflops(device_name, peak_key(autocast_dtype, tf32)) if device == "cuda" else None
    if known:
        peak, model = known
        figures.update(peak_tflops_per_device=peak, peak_gpu_model=model, mfu=achieved / world_size / peak)
    return figures
