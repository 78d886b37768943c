"""format=jpeg: one real JPEG image per file (samples_per_file=1), about record_size bytes.

Images are smooth seeded noise (a coarse random image, upscaled, with fine noise on top),
which compresses roughly like a photograph; their side is chosen so the file comes out near
record_size. A read checks the JPEG start and end markers, or, with jpeg_decode=true, decodes
the image (simplejpeg, libjpeg-turbo) as a loader would.
"""

from __future__ import annotations

import math
from typing import Tuple

import numpy as np

from bench.iobench.formats.base import CorruptFile, FileSpec, Format

QUALITY = 90
BLOCK = 8  # the coarse image's pixels are BLOCK x BLOCK in the final one
BYTES_PER_PIXEL = 0.6  # a first guess, corrected after one trial encode


def _image(side: int, rng: np.random.Generator) -> np.ndarray:
    coarse = rng.integers(0, 256, (-(-side // BLOCK), -(-side // BLOCK), 3), dtype=np.uint8)
    image = np.repeat(np.repeat(coarse, BLOCK, axis=0), BLOCK, axis=1)[:side, :side]
    noise = rng.integers(-12, 13, image.shape, dtype=np.int16)
    return np.clip(image.astype(np.int16) + noise, 0, 255).astype(np.uint8)


def encode_image(target: int, seed: int) -> bytes:
    import simplejpeg

    side = max(16, int(math.sqrt(target / BYTES_PER_PIXEL)))
    data = simplejpeg.encode_jpeg(_image(side, np.random.default_rng(seed)), quality=QUALITY)
    side = max(16, int(side * math.sqrt(target / len(data))))  # one correction: bytes grow with the area
    return simplejpeg.encode_jpeg(_image(side, np.random.default_rng(seed)), quality=QUALITY)


class JPEGFormat(Format):
    name, extension = "jpeg", "jpg"
    overhead_per_file, overhead_per_sample = 4096, 0  # on disk: a JPEG is encoded to about record_size

    def encode(self, spec: FileSpec, payload: bytes) -> Tuple[bytes, FileSpec]:
        data = encode_image(spec.record_size, int.from_bytes(payload[:8].ljust(8, b"\0"), "little"))
        return data, FileSpec(spec.key, spec.index, 1, len(data)).written(len(data))

    def check_file(self, data: memoryview, spec: FileSpec, decode: bool = False) -> int:
        self.check_sample(data, spec, decode)
        return 1

    def check_sample(self, data: memoryview, spec: FileSpec, decode: bool = False) -> None:
        self.expect_size(data, spec)
        if bytes(data[:2]) != b"\xff\xd8" or bytes(data[-2:]) != b"\xff\xd9":
            raise CorruptFile(f"{spec.key}: not a JPEG image (no start or end marker)")
        if decode:
            import simplejpeg

            try:
                simplejpeg.decode_jpeg(data)
            except ValueError as exc:
                raise CorruptFile(f"{spec.key}: the JPEG does not decode ({exc})") from None
