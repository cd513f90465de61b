"""The decode paths (``--decode pil|cpu|gpu|auto``): the same rows in the same order, the device path's fallback
for what it cannot decode, named in the log, and the path recorded in the store's identity. The ``gpu`` path runs
here on the CPU device through the same batched function it runs on CUDA."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import lightning as L
import numpy as np
import pytest
import torch
from conftest_data import tiny  # noqa: F401 - fixture
from PIL import Image

from cog_pl.data.transforms import TransformConfig, build_transform, normalize_images, pil_resize_crop
from cog_pl.extract.datamodule import ExtractionDataModule
from cog_pl.extract.decode import device_unsupported, resolve_decode
from cog_pl.extract.module import FeatureExtractor
from cog_pl.features.store import StoreError, open_store

MODEL = "timm:resnet10t"
PHOTO = Path(__import__("sklearn.datasets", fromlist=["x"]).__file__).parent / "images" / "china.jpg"


def photo(size: tuple[int, int] = (96, 72)) -> Image.Image:
    return Image.open(PHOTO).convert("RGB").resize(size, Image.BICUBIC)


def encoded(kind: str) -> bytes:
    buf, img = io.BytesIO(), photo()
    if kind == "cmyk":
        img.convert("CMYK").save(buf, "JPEG", quality=90)
    elif kind == "progressive":
        img.save(buf, "JPEG", quality=90, progressive=True)
    elif kind == "png":
        img.save(buf, "PNG")
    elif kind == "gray":
        img.convert("L").save(buf, "JPEG", quality=90)
    else:
        img.save(buf, "JPEG", quality=90)
    return buf.getvalue()


def test_the_device_decoder_is_given_only_sequential_jpegs():
    assert device_unsupported(encoded("baseline")) is None
    assert device_unsupported(encoded("gray")) is None
    assert device_unsupported(encoded("progressive")) == "progressive JPEG"
    assert device_unsupported(encoded("cmyk")) == "CMYK JPEG (4 components)"
    assert device_unsupported(encoded("png")) == "PNG content"
    data = encoded("baseline")
    assert device_unsupported(data[: len(data) // 2]) == "truncated JPEG (no end marker)"
    assert device_unsupported(b"not an image at all") == "not a JPEG"
    buf = io.BytesIO()
    photo().save(buf, "WEBP")
    assert device_unsupported(buf.getvalue()) == "WebP content"


def test_auto_is_the_fastest_cpu_path_within_the_bound_off_cuda_and_bad_names_are_refused():
    assert resolve_decode("auto", "cpu") == "cpu"
    assert resolve_decode("pil", "cpu") == "pil"
    with pytest.raises(ValueError, match="--decode 'nvjpeg'; expected one of pil, cpu, gpu, auto"):
        resolve_decode("nvjpeg", "cpu")


def test_pixels_normalised_on_the_device_are_the_reference_transform_bit_for_bit():
    cfg = TransformConfig(crop=64, resize=72, mean=(0.5, 0.4, 0.3), std=(0.2, 0.25, 0.3))
    img = photo((120, 90))
    ref = build_transform(cfg)(img)
    mine = normalize_images(pil_resize_crop(img, cfg)[None], cfg)[0]
    assert torch.equal(ref, mine)


@pytest.fixture
def tree(tiny, tmp_path):  # noqa: F811
    """IN-1K val of photos: sequential JPEGs and, in the first class, a CMYK, a progressive and a PNG-in-.JPEG."""
    root = tiny.make_in1k(tmp_path / "in1k", n_train=1, n_val=4)
    for k, folder in enumerate(sorted((root / "val").iterdir())):
        files = sorted(folder.glob("*.JPEG"))
        for j, path in enumerate(files):
            img = photo((90 + 7 * j + 3 * k, 70 + 5 * j))
            buf = io.BytesIO()
            img.save(buf, "JPEG", quality=85)
            path.write_bytes(buf.getvalue())
        if k == 0:
            for path, kind in zip(files, ("cmyk", "progressive", "png")):
                path.write_bytes(encoded(kind))
    return root


def extract(root: Path, out: Path, decode: str, **kw) -> tuple[ExtractionDataModule, dict]:
    torch.manual_seed(0)
    model = FeatureExtractor(MODEL, random_weights=True)
    dm = ExtractionDataModule(out=str(out), model_name="m", in1k_root=str(root), domains=("in1k",),
                              splits=("test",), transform=TransformConfig(crop=64, resize=72), batch_size=5,
                              num_workers=0, decode=decode, **kw)
    trainer = L.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.predict(model, datamodule=dm, return_predictions=False)
    return dm, open_store(out / "m" / "in1k" / "test")


def test_cpu_and_gpu_paths_give_the_rows_of_pil_and_the_fallback_names_its_files(tree, tmp_path, caplog):
    stores = {}
    with caplog.at_level(logging.INFO, logger="cog_pl.extract.decode_device"):
        for decode in ("pil", "cpu", "gpu"):
            _, stores[decode] = extract(tree, tmp_path / decode, decode)
    ref = stores["pil"]
    for decode, store in stores.items():
        assert store.meta["decode"] == decode
        np.testing.assert_array_equal(store.labels, ref.labels)  # same images, same labels, same order
        np.testing.assert_array_equal(store.index, ref.index)
        a, b = np.asarray(store.features, np.float32), np.asarray(ref.features, np.float32)
        cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
        assert cos.min() > 0.99, (decode, cos.min())
    # on the CPU device the batched decoder is libjpeg-turbo too: the gpu path's pixels are the cpu path's
    np.testing.assert_allclose(np.asarray(stores["gpu"].features, np.float32),
                               np.asarray(stores["cpu"].features, np.float32), rtol=0, atol=1e-3)
    fell = [r.getMessage() for r in caplog.records if "decoded on the CPU, not the device" in r.getMessage()]
    assert len(fell) == 3
    for reason in ("progressive JPEG", "CMYK JPEG (4 components)", "PNG content"):
        [line] = [m for m in fell if reason in m]
        assert ".JPEG" in line and str(tree) in line  # the file is named
    summary = [r.getMessage() for r in caplog.records if "decode path gpu" in r.getMessage()]
    assert summary == [] or "3 on the CPU" in summary[0]


def test_a_store_made_with_another_decode_path_is_refused_and_old_stores_count_as_pil(tree, tmp_path):
    _, store = extract(tree, tmp_path / "o", "cpu")
    with pytest.raises(StoreError, match=r"decode='cpu' \(this run: 'pil'\)"):
        extract(tree, tmp_path / "o", "pil")
    meta = dict(store.meta)
    del meta["decode"]  # a store written before decode paths existed was made by PIL
    (tmp_path / "o" / "m" / "in1k" / "test" / "meta.json").write_text(__import__("json").dumps(meta))
    extract(tree, tmp_path / "o", "pil")  # accepted as complete: nothing to extract
    with pytest.raises(StoreError, match="decode"):
        extract(tree, tmp_path / "o", "cpu")


def test_a_corrupt_file_is_unreadable_on_every_path_and_skipped_alike(tree, tmp_path):
    bad = sorted((tree / "val").iterdir())[1] / "broken.JPEG"
    bad.write_bytes(encoded("baseline")[:300])
    rows = {}
    for decode in ("pil", "cpu", "gpu"):
        _, store = extract(tree, tmp_path / f"s-{decode}", decode, on_error="skip", max_skipped=2)
        rows[decode] = [m["path"] for m in store.meta["missing"]]
    assert rows["pil"] == rows["cpu"] == rows["gpu"] and str(bad) in rows["pil"][0]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_device_decoder_on_cuda_gives_the_rows_of_pil_and_names_its_fallbacks(tree, tmp_path, caplog):
    stores = {}
    with caplog.at_level(logging.INFO, logger="cog_pl.extract.decode_device"):
        for decode in ("pil", "gpu"):
            torch.manual_seed(0)
            model = FeatureExtractor(MODEL, random_weights=True)
            dm = ExtractionDataModule(out=str(tmp_path / decode), model_name="m", in1k_root=str(tree),
                                      domains=("in1k",), splits=("test",), batch_size=5, num_workers=0,
                                      transform=TransformConfig(crop=64, resize=72), decode=decode)
            L.Trainer(accelerator="cuda", devices=1, logger=False, enable_progress_bar=False,
                      enable_model_summary=False).predict(model, datamodule=dm, return_predictions=False)
            stores[decode] = open_store(tmp_path / decode / "m" / "in1k" / "test")
    np.testing.assert_array_equal(stores["gpu"].labels, stores["pil"].labels)
    np.testing.assert_array_equal(stores["gpu"].index, stores["pil"].index)
    a, b = (np.asarray(stores[k].features, np.float32) for k in ("gpu", "pil"))
    cos = (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
    assert cos.min() > 0.99 and stores["gpu"].meta["decode"] == "gpu"
    fell = [r.getMessage() for r in caplog.records if "decoded on the CPU, not the device" in r.getMessage()]
    assert len(fell) == 3 and all(str(tree) in m for m in fell)
