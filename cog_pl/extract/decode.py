"""Decode paths: how extraction turns encoded images into pixels, chosen by name (``--decode``).

- ``pil``: PIL decodes, PIL resizes (bicubic) and crops, in the loader workers: the protocol's reference.
- ``cpu``: the loader workers decode with libjpeg-turbo through :mod:`torchvision.io` (PNG, WebP, ... through its
  other decoders) and resize with torch's antialiased kernels; an image torchvision cannot decode goes through PIL.
- ``gpu``: the workers only read bytes; each batch is decoded on the device (``torchvision.io.decode_jpeg`` on a
  list, nvJPEG's batched decoder on CUDA), resized, cropped and normalised there
  (:class:`~cog_pl.extract.decode_device.BatchDecoder`). Images the device decoder cannot take
  (:func:`device_unsupported`: progressive, CMYK or lossless JPEGs, PNG or WebP content, truncated files) are decoded
  by the ``cpu`` path in the workers, counted and named in the log.
- ``auto``: ``gpu`` where extraction runs on CUDA, else the fastest CPU path of :data:`CPU_PATHS_WITHIN_BOUND`.

All paths make ``uint8`` crops of the same size (:mod:`cog_pl.data.transforms`), normalised on the device. The
resolved path is recorded in every store's meta and identity (``decode``) and so in every row made from it.
"""

from __future__ import annotations

import logging
import warnings

import torch

from cog_pl.errors import CogError

log = logging.getLogger(__name__)

DECODE_PATHS = ("pil", "cpu", "gpu", "auto")
#: CPU paths whose features stay within the fidelity bound against ``pil`` (mean cosine >= 0.999, worst >= 0.99 with
#: the real EfficientNet-Lite0 weights on real photographs: tests/extract/test_fidelity.py), fastest first
#: (benchmarks/bench_extract.py). ``auto`` takes the first off CUDA.
CPU_PATHS_WITHIN_BOUND = ("cpu", "pil")
_SOF_OK = {0xC0: "baseline", 0xC1: "extended sequential"}  # Huffman-coded sequential JPEGs: what nvJPEG decodes
_SOF_NAMES = {0xC2: "progressive", 0xC3: "lossless", 0xC5: "hierarchical", 0xC6: "hierarchical progressive",
              0xC7: "hierarchical lossless", 0xC9: "arithmetic-coded", 0xCA: "arithmetic-coded progressive",
              0xCB: "arithmetic-coded lossless", 0xCD: "hierarchical arithmetic-coded",
              0xCE: "hierarchical arithmetic-coded progressive", 0xCF: "hierarchical arithmetic-coded lossless"}
_MAGIC = ((b"\x89PNG\r\n\x1a\n", "PNG"), (b"GIF8", "GIF"), (b"BM", "BMP"), (b"II*\x00", "TIFF"), (b"MM\x00*", "TIFF"))


def check_decode(decode: str) -> None:
    """Refuse an unknown decode path, naming the option."""
    if decode not in DECODE_PATHS:
        raise CogError(f"--decode {decode!r}; expected one of {', '.join(DECODE_PATHS)}")


def resolve_decode(decode: str, device: str | torch.device) -> str:
    """The path ``decode`` names on ``device`` (the extraction's): ``auto`` is ``gpu`` on CUDA, else the first of
    :data:`CPU_PATHS_WITHIN_BOUND`. ``gpu`` off CUDA runs the same batched code on the CPU (logged: it is slower than
    ``cpu``, which decodes in parallel workers)."""
    check_decode(decode)
    kind = torch.device(device).type
    if decode == "auto":
        return "gpu" if kind == "cuda" else CPU_PATHS_WITHIN_BOUND[0]
    if decode == "gpu" and kind != "cuda":
        log.warning("--decode gpu on %s: batches are decoded in the main process on the CPU (--decode cpu decodes "
                    "them in the loader workers)", device)
    return decode


def device_unsupported(data: bytes) -> str | None:
    """Why the device decoder cannot take these encoded bytes (``"progressive JPEG"``, ``"CMYK JPEG (4
    components)"``, ``"PNG content"``, ``"truncated JPEG"``, ...), or None for a sequential Huffman-coded JPEG of 1 or
    3 components with its end marker. Reads the markers only, never the pixels."""
    if not data.startswith(b"\xff\xd8"):
        if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
            return "WebP content"
        return next((f"{name} content" for magic, name in _MAGIC if data.startswith(magic)), "not a JPEG")
    pos, n = 2, len(data)
    while pos + 4 <= n:
        if data[pos] != 0xFF:
            return "damaged JPEG (bad marker)"
        marker = data[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:  # markers without a length
            pos += 2
            continue
        length = int.from_bytes(data[pos + 2:pos + 4], "big")
        if marker in _SOF_OK or marker in _SOF_NAMES:
            if marker in _SOF_NAMES:
                return f"{_SOF_NAMES[marker]} JPEG"
            components = data[pos + 9] if pos + 9 < n else 0
            if components == 4:
                return "CMYK JPEG (4 components)"
            if components not in (1, 3):
                return f"JPEG of {components} components"
            tail = data.rstrip(b"\x00\r\n ")
            return None if tail.endswith(b"\xff\xd9") else "truncated JPEG (no end marker)"
        if marker == 0xDA:  # scan data before any frame header
            break
        pos += 2 + length
    return "damaged JPEG (no frame header)"


def decode_rgb(data: bytes | torch.Tensor) -> torch.Tensor:
    """Encoded bytes decoded on the CPU by :mod:`torchvision.io` (libjpeg-turbo for JPEGs) as ``uint8 [3,H,W]`` RGB;
    raises on data it cannot decode."""
    from torchvision.io import ImageReadMode, decode_image

    raw = data if isinstance(data, torch.Tensor) else torch.frombuffer(bytearray(data), dtype=torch.uint8)
    with warnings.catch_warnings():  # torchvision 0.29 deprecates its decoders in favour of torchcodec
        warnings.simplefilter("ignore", DeprecationWarning)
        return decode_image(raw, mode=ImageReadMode.RGB)
