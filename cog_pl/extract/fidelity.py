"""How far a decode path's pixels and features are from the ``pil`` reference (:mod:`cog_pl.extract.decode`).

:func:`path_crops` makes the ``uint8`` crop of encoded bytes the way a path does (``pil``, ``cpu``, ``gpu`` on a given
device, and ``draft``: PIL decoding at a reduced DCT scale, measured to see whether reduced-size decoding is worth
it; not a path extraction offers). :func:`fidelity` compares paths with ``pil`` on a set of photographs through a
backbone and its classifier: the per-pixel difference after resizing, the cosine similarity of the features and the
agreement of the classifier's top-1. The bound a path must meet to be picked by ``auto``: :data:`BOUND`.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from PIL import Image

from cog_pl.data.transforms import TransformConfig, normalize_images, pil_resize_crop, tensor_resize_crop
from cog_pl.errors import CogError
from cog_pl.extract.decode import decode_rgb

#: The fidelity bound of a decode path against ``pil``: mean and worst cosine similarity of the features.
BOUND = {"mean_cosine": 0.999, "worst_cosine": 0.99}


def path_crops(data: Sequence[bytes], cfg: TransformConfig, path: str, device: str = "cpu") -> torch.Tensor:
    """``uint8 [N,3,S,S]`` crops of encoded images as the decode path ``path`` makes them (on ``device`` for
    ``gpu``)."""
    if path == "pil":
        return torch.stack([pil_resize_crop(Image.open(io.BytesIO(d)).convert("RGB"), cfg) for d in data])
    if path == "cpu":
        return torch.stack([tensor_resize_crop(decode_rgb(d), cfg) for d in data])
    if path == "draft":  # libjpeg's DCT scaling: decode at 1/2, 1/4, 1/8 while still at least the resize target
        out = []
        for d in data:
            img = Image.open(io.BytesIO(d))
            img.draft("RGB", _draft_size(img.size, cfg.resize))
            out.append(pil_resize_crop(img.convert("RGB"), cfg))
        return torch.stack(out)
    if path == "gpu":
        import warnings

        from torchvision.io import ImageReadMode, decode_jpeg

        raw = [torch.frombuffer(bytearray(d), dtype=torch.uint8) for d in data]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            images = decode_jpeg(raw, mode=ImageReadMode.RGB, device=device)
        return torch.stack([tensor_resize_crop(im, cfg) for im in images]).cpu()
    raise CogError(f"unknown decode path {path!r}")


def _draft_size(size: tuple[int, int], resize: int) -> tuple[int, int]:
    """The size to ask ``Image.draft`` for so the short side stays at least ``resize`` (PIL picks the largest
    scale whose result is at least the size asked)."""
    w, h = size
    scale = resize / min(w, h)
    return max(1, round(w * scale)), max(1, round(h * scale))


@dataclass
class Fidelity:
    """One path against ``pil``: pixel difference (grey levels, mean and max), feature cosines, top-1 agreement."""

    path: str
    images: int
    pixel_mean: float
    pixel_max: int
    mean_cosine: float
    worst_cosine: float
    top1_agreement: float

    @property
    def within_bound(self) -> bool:
        return self.mean_cosine >= BOUND["mean_cosine"] and self.worst_cosine >= BOUND["worst_cosine"]


def fidelity(photos: Sequence[bytes], cfg: TransformConfig, features: Callable[[torch.Tensor], torch.Tensor],
             classify: Callable[[torch.Tensor], torch.Tensor], paths: Sequence[str], device: str = "cpu"
             ) -> list[Fidelity]:
    """Each of ``paths`` against ``pil`` on ``photos`` (encoded), through ``features`` (normalised batch ->
    features) and ``classify`` (features -> logits)."""
    with torch.inference_mode():
        ref_px = path_crops(photos, cfg, "pil")
        ref = features(normalize_images(ref_px, cfg))
        ref_top1 = classify(ref).argmax(1)
        out = []
        for path in paths:
            px = path_crops(photos, cfg, path, device)
            feats = features(normalize_images(px, cfg))
            cos = torch.nn.functional.cosine_similarity(feats, ref, dim=1)
            diff = (px.int() - ref_px.int()).abs()
            out.append(Fidelity(path, len(photos), float(diff.float().mean()), int(diff.max()), float(cos.mean()),
                                float(cos.min()), float((classify(feats).argmax(1) == ref_top1).float().mean())))
    return out


#: Photographs shipped inside packages of the stack (PNGs among them are encoded as JPEG, quality 90).
SAMPLE_PHOTOS = {"sklearn.datasets": ("images/china.jpg", "images/flower.jpg"),
                 "skimage.data": ("rocket.jpg", "retina.jpg", "hubble_deep_field.jpg", "astronaut.png", "chelsea.png",
                                  "coffee.png", "motorcycle_left.png", "camera.png", "brick.png", "grass.png",
                                  "gravel.png", "horse.png"),
                 "matplotlib": ("mpl-data/sample_data/grace_hopper.jpg",)}


def sample_photos(long_side: int | None = 500) -> dict[str, bytes]:
    """The :data:`SAMPLE_PHOTOS` of the packages installed, as JPEG bytes: each as shipped and, with ``long_side``,
    also scaled to ImageNet's typical size (bicubic, quality 90)."""
    import importlib.util
    from pathlib import Path

    out = {}
    for package, files in SAMPLE_PHOTOS.items():
        found = importlib.util.find_spec(package)  # where the package's files are, without running it
        if found is None or found.origin is None:
            continue
        root = Path(found.origin).parent
        for name in files:
            path = root / name
            if not path.is_file():
                continue
            img = Image.open(path)
            if path.suffix == ".jpg":
                out[path.stem] = path.read_bytes()
            else:
                out[path.stem] = _jpeg(img.convert("RGB"))
            if long_side and max(img.size) > long_side:
                scale = long_side / max(img.size)
                small = img.convert("RGB").resize((round(img.width * scale), round(img.height * scale)),
                                                  Image.BICUBIC)
                out[f"{path.stem}@{long_side}"] = _jpeg(small)
    return out


def _jpeg(img: Image.Image, quality: int = 90) -> bytes:
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=quality)
    return buf.getvalue()
