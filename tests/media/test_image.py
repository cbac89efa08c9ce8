"""Images in other modes: 16-bit and 32-bit pixels, animations, EXIF orientation, huge and bomb images."""

from __future__ import annotations

import time

import numpy as np
import pytest
from PIL import ExifTags, Image

from easyvideor1.media.failures import MediaFailure
from easyvideor1.media.image import ImageBudget, load_image

BUDGET = ImageBudget(factor=32, max_pixels=64 * 32 * 32)


@pytest.mark.parametrize("mode, suffix", [("I;16", "png"), ("I", "tif")], ids=["16-bit PNG", "32-bit TIFF"])
def test_deep_grayscale_is_scaled_to_eight_bits_not_clipped(tmp_path, mode, suffix):
    ramp = np.tile(np.linspace(0, 65535, 256), (128, 1))  # black on the left to white on the right
    path = tmp_path / f"ramp.{suffix}"
    Image.fromarray(ramp.astype(np.uint16 if mode == "I;16" else np.int32)).save(path)
    assert Image.open(path).mode == mode
    pixels = np.asarray(load_image(str(path), BUDGET), dtype=float)
    assert 110 < pixels.mean() < 145  # a plain conversion gives ~254: almost every pixel white
    assert pixels[:, :8].mean() < 10 and pixels[:, -8:].mean() > 245


@pytest.mark.parametrize("suffix", ["gif", "webp"])
def test_an_animation_gives_its_first_frame_with_a_warning(tmp_path, suffix):
    path = tmp_path / f"blink.{suffix}"
    red, blue = Image.new("RGB", (64, 64), (255, 0, 0)), Image.new("RGB", (64, 64), (0, 0, 255))
    red.save(path, save_all=True, append_images=[blue], duration=100, loop=0)
    with pytest.warns(UserWarning, match=f"{path}: an animated image; only its first frame is used"):
        picture = load_image(str(path), BUDGET)
    r, g, b = np.asarray(picture, dtype=float).reshape(-1, 3).mean(axis=0)
    assert r > 240 and b < 15


@pytest.mark.parametrize("budget", [BUDGET, None], ids=["resized", "as-is"])
def test_exif_orientation_is_applied(tmp_path, budget):
    stored = Image.new("RGB", (640, 320), (0, 0, 255))
    stored.paste((255, 0, 0), (0, 0, 320, 320))  # the stored left half red
    exif = Image.Exif()
    exif[ExifTags.Base.Orientation] = 6  # shown turned 90 degrees clockwise: portrait, red on top
    path = tmp_path / "phone.jpg"
    stored.save(path, exif=exif)
    upright = load_image(str(path), budget)
    assert upright.height > upright.width
    if budget is None:
        assert upright.size == (320, 640)
    top, bottom = np.asarray(upright, dtype=float)[[upright.height // 4, 3 * upright.height // 4]].mean(
        axis=1
    )
    assert top[0] > 200 and bottom[2] > 200


@pytest.mark.parametrize("suffix", ["png", "jpg"])
def test_a_huge_image_is_reduced_before_anything_else_touches_it(tmp_path, monkeypatch, suffix):
    """6000 x 6000 under a 256 x 256 budget: JPEG is decoded at 1/8 scale, PNG reduced right after its
    decode; no conversion, turn or resampling ever sees the full-size pixels."""
    path = tmp_path / f"huge.{suffix}"
    Image.new("L" if suffix == "png" else "RGB", (6000, 6000), 90).save(path, compress_level=1)
    seen = []
    for name in ("reduce", "convert", "resize", "transpose", "copy"):

        def spy(im, *args, _real=getattr(Image.Image, name), _name=name, **kwargs):
            seen.append((_name, im.width * im.height))
            return _real(im, *args, **kwargs)

        monkeypatch.setattr(Image.Image, name, spy)
    start = time.monotonic()
    picture = load_image(str(path), BUDGET)
    assert time.monotonic() - start < 1.5
    assert picture.size == (256, 256) and picture.mode == "RGB"
    full_size = [name for name, pixels in seen if pixels > 1_000_000]
    assert full_size == (["reduce"] if suffix == "png" else []), seen


def test_a_decompression_bomb_is_one_line_naming_the_file(tmp_path, monkeypatch):
    path = tmp_path / "bomb.png"
    Image.new("L", (64, 64)).save(path)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)  # 4096 pixels: past twice the limit
    with pytest.raises(MediaFailure) as e:
        load_image(str(path), BUDGET)
    assert str(e.value).startswith(f"{path}: image too large: ") and "\n" not in str(e.value)
