"""Decode + crop + resize one image into a uint8 HWC slot of a batch, and normalise a batch on the device.

Workers never make float tensors: a 224x224 image travels as 150 KB of uint8 (not 600 KB of
float32), and the float conversion + ImageNet normalisation happen once per batch, on the device.
JPEGs are decoded at 1/2, 1/4 or 1/8 scale (DCT-domain, nearly free) when the crop still
covers the output size at that scale.
"""

from __future__ import annotations

import functools
import io
import math
import random
from typing import List, Tuple

import numpy as np
import simplejpeg
import torch
from PIL import Image

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
RRC_SCALE = (0.08, 1.0)  # torchvision RandomResizedCrop defaults
RRC_RATIO = (3 / 4, 4 / 3)
VAL_RESIZE_RATIO = 256 / 224  # val: resize the short side to 256/224 x size, then center-crop size
DCT_SCALES = (8, 4, 2)  # libjpeg-turbo's fast scaled IDCTs (1/8, 1/4, 1/2); others are slower than full size

Box = Tuple[float, float, float, float]  # left, top, width, height in source pixels


class CorruptImage(Exception):
    """The bytes are not a decodable image."""


def random_resized_crop_box(width: int, height: int, rng: random.Random) -> Box:
    """torchvision's RandomResizedCrop.get_params on a plain RNG (same distribution)."""
    area = width * height
    log_ratio = (math.log(RRC_RATIO[0]), math.log(RRC_RATIO[1]))
    for _ in range(10):
        target_area = area * rng.uniform(*RRC_SCALE)
        aspect = math.exp(rng.uniform(*log_ratio))
        w = round(math.sqrt(target_area * aspect))
        h = round(math.sqrt(target_area / aspect))
        if 0 < w <= width and 0 < h <= height:
            return rng.randint(0, width - w), rng.randint(0, height - h), w, h
    # fallback: the whole image, its aspect clamped to the ratio range
    in_ratio = width / height
    if in_ratio < RRC_RATIO[0]:
        w, h = width, round(width / RRC_RATIO[0])
    elif in_ratio > RRC_RATIO[1]:
        w, h = round(height * RRC_RATIO[1]), height
    else:
        w, h = width, height
    return (width - w) // 2, (height - h) // 2, w, h


def center_crop_box(width: int, height: int) -> Box:
    side = min(width, height) / VAL_RESIZE_RATIO
    return (width - side) / 2, (height - side) / 2, side, side


def crop_box(width: int, height: int, train: bool, rng: random.Random) -> Box:
    return random_resized_crop_box(width, height, rng) if train else center_crop_box(width, height)


def _dct_scale(box: Box, size: int) -> int:
    """The largest fast DCT downscale (8, 4, 2 or 1) that keeps the crop at least `size` pixels."""
    shortest = min(box[2], box[3])
    return next((s for s in DCT_SCALES if shortest / s >= size), 1)


Decoded = Tuple[np.ndarray, Box, int, int]  # pixels (maybe DCT-downscaled), crop box and size of the source


def _decode_simplejpeg(data: bytes | memoryview, train: bool, size: int, rng: random.Random) -> Decoded:
    height, width, _, _ = simplejpeg.decode_jpeg_header(data)
    box = crop_box(width, height, train, rng)
    scale = _dct_scale(box, size)
    min_width, min_height = math.ceil(width / scale), math.ceil(height / scale)
    pixels = simplejpeg.decode_jpeg(
        data, colorspace="RGB", fastdct=True, fastupsample=True, min_width=min_width, min_height=min_height
    )
    return pixels, box, width, height


def _decode_pil(data: bytes | memoryview, train: bool, size: int, rng: random.Random) -> Decoded:
    image = Image.open(io.BytesIO(data))
    width, height = image.size
    box = crop_box(width, height, train, rng)
    scale = _dct_scale(box, size)
    if scale > 1:
        image.draft("RGB", (math.ceil(width / scale), math.ceil(height / scale)))  # JPEG only; else a no-op
    return np.array(image.convert("RGB")), box, width, height


def decode_crop(
    data: bytes | memoryview, train: bool, size: int, rng: random.Random, decoder: str = "simplejpeg"
) -> np.ndarray:
    """Decode `data` and return the crop (train: random-resized, val: center) as an HWC uint8
    view, not yet resized. What simplejpeg cannot read (PNG, CMYK) goes through PIL; raises CorruptImage."""
    if not len(data):  # a zero-byte file (an interrupted copy): skipped and counted like any corrupt image
        raise CorruptImage("an empty file (0 bytes)")
    try:
        if decoder == "simplejpeg" and simplejpeg.is_jpeg(data):
            try:
                pixels, box, width, height = _decode_simplejpeg(data, train, size, rng)
            except ValueError:  # e.g. CMYK: let PIL try before calling it corrupt
                pixels, box, width, height = _decode_pil(data, train, size, rng)
        else:
            pixels, box, width, height = _decode_pil(data, train, size, rng)
    except Image.UnidentifiedImageError:
        raise CorruptImage("not an image format PIL or libjpeg-turbo can decode") from None
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        raise CorruptImage(f"{type(exc).__name__}: {exc}") from None
    sx, sy = pixels.shape[1] / width, pixels.shape[0] / height  # < 1 after a DCT downscale
    left, top = int(box[0] * sx), int(box[1] * sy)
    right = max(left + 1, min(pixels.shape[1], round((box[0] + box[2]) * sx)))
    bottom = max(top + 1, min(pixels.shape[0], round((box[1] + box[3]) * sy)))
    return pixels[top:bottom, left:right]


def resize_batch_into(target: torch.Tensor, source: torch.Tensor) -> None:
    """Bilinear (antialiased) resize of uint8 NHWC `source` straight into uint8 NHWC `target`.
    NHWC permuted to NCHW is a channels_last view: torch's uint8 channels_last kernel is ~2x
    faster than PIL's resize, and its out= form writes into the batch without a temporary."""
    if source.shape[1:3] == target.shape[1:3]:
        target.copy_(source)
        return
    torch._C._nn._upsample_bilinear2d_aa(  # type: ignore[call-arg]  # the stub has no out= overload; torch has
        source.permute(0, 3, 1, 2), list(target.shape[1:3]), False, None, None, out=target.permute(0, 3, 1, 2)
    )


def resize_into(slot: np.ndarray, crop: np.ndarray, flip: bool) -> None:
    """Resize an HWC uint8 crop into `slot` (size x size x 3), flipped left-right if asked."""
    target = torch.from_numpy(slot)
    resize_batch_into(target.unsqueeze(0), torch.from_numpy(crop).unsqueeze(0))
    if flip:
        target.copy_(target.flip(1))  # torch's flip is ~10x faster than a strided numpy copy


def normalize_into(out: torch.Tensor, pixels: torch.Tensor) -> torch.Tensor:
    """uint8 NHWC `pixels` -> ImageNet-normalised float32 in `out` (N, C, H, W; contiguous or
    channels_last), both on the same device.

    channels_last `out` is NHWC in memory: copy + one multiply-add over rows of (R, G, B, R, ...)
    against a per-row pattern (broadcasting a size-3 dim is ~2x slower). Contiguous `out`: one
    strided convert-copy, then one in-place multiply-add pass per channel plane."""
    n, h, w, c = pixels.shape
    if out.is_contiguous(memory_format=torch.channels_last) and not out.is_contiguous():
        rows = out.permute(0, 2, 3, 1).view(n * h, w * c)
        rows.copy_(pixels.view(n * h, w * c))
        scale, shift = _row_pattern(out.device, w)
        return torch.addcmul(shift, rows, scale, out=rows).view(n, h, w, c).permute(0, 3, 1, 2)
    out.copy_(pixels.permute(0, 3, 1, 2))
    shifts = _channel_shifts(out.device)
    for channel in range(c):  # plane = shift + scale * plane, one pass
        torch.add(shifts[channel], out[:, channel], alpha=SCALE[channel], out=out[:, channel])
    return out


# (x - 255 mean) / (255 std) as x * scale + shift, per channel
SCALE = tuple(1 / (255 * s) for s in IMAGENET_STD)
SHIFT = tuple(-m / s for m, s in zip(IMAGENET_MEAN, IMAGENET_STD, strict=True))


@functools.lru_cache(maxsize=None)
def _channel_shifts(device: torch.device) -> List[torch.Tensor]:
    return [torch.tensor(shift, device=device) for shift in SHIFT]


@functools.lru_cache(maxsize=None)
def _row_pattern(device: torch.device, width: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """scale and shift repeated along one NHWC row (R, G, B, R, G, B, ...), kept per device and width."""
    return torch.tensor(SCALE).repeat(width).to(device), torch.tensor(SHIFT).repeat(width).to(device)
