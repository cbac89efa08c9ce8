"""One image file in, one model-ready RGB picture out: the loader every path that reads an image uses.

What it does with images that are not plain 8-bit RGB photographs:
- 16-bit grayscale (PNG ``I;16``) and 32-bit (``I``, ``F``) images are scaled to 8 bits (65535 -> 255),
  not clipped: a plain mode conversion turns nearly every 16-bit pixel white. ``I`` and ``F`` images
  carry no declared range; they are read as 16-bit, as PNG and most TIFF writers store them.
- An animated GIF, WebP or PNG gives its first frame, with a warning naming the file (a record that
  means another frame names a still image).
- The EXIF orientation is applied (``ImageOps.exif_transpose``, as transformers' own image loader
  does): the model sees the picture upright, and its pixel budget applies to the upright size.
- A large image is decoded reduced: JPEG at 1/2, 1/4 or 1/8 scale by the decoder itself (``draft``),
  every format by an integer box filter (``Image.reduce``) right after decoding, before any mode
  conversion or resampling, down to no less than twice the output size (Pillow's ``thumbnail``
  keeps the same margin, so the last bicubic step is as sharp as from the full image). A JPEG is
  therefore never held at full size; a PNG is decoded once in its own mode (the decoder has no
  reduced mode), then reduced.
- PIL's decompression-bomb limit (``PIL.Image.MAX_IMAGE_PIXELS``) stays: a file past twice that many
  pixels is refused before decoding, ``<file>: image too large: ...``.

Errors: a :class:`~.failures.MediaFailure` ``<path>: <cause>`` for a file that cannot be used.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .failures import MediaFailure, loading, regular_file
from .sampling import image_size

if TYPE_CHECKING:  # PIL is imported where images are read: run configs import this module
    from PIL import Image

REDUCING_GAP = 2  # a decoded image is reduced to no less than this many times the output size
_TURNED = (5, 6, 7, 8)  # EXIF orientations that swap width and height


@dataclass(frozen=True)
class ImageBudget:
    """The size an image is resized to: sides that are multiples of ``factor`` (the family's patch
    grid), area within ``[min_pixels, max_pixels]`` (``None``: qwen-vl-utils' image defaults)."""

    factor: int
    min_pixels: int | None = None
    max_pixels: int | None = None

    def size(self, height: int, width: int) -> tuple[int, int]:
        return image_size(height, width, self.factor, self.min_pixels, self.max_pixels)


def load_image(path: str, budget: ImageBudget | None) -> Image.Image:
    """``path`` as an upright 8-bit RGB image of ``budget``'s size (as it is, when ``budget`` is None:
    a family whose processor sizes images itself, such as InternVL's tiles). See the module
    docstring for 16-bit, animated, rotated and large images.

    Raises :class:`~.failures.MediaFailure` for an image that cannot be used.
    """
    from PIL import Image, ImageOps

    with loading(path):
        regular_file(path)  # PIL would block opening a FIFO
        try:
            with Image.open(path) as src:  # refuses a decompression bomb before decoding
                if getattr(src, "is_animated", False):
                    warnings.warn(f"{path}: an animated image; only its first frame is used", stacklevel=2)
                stored = src.size  # the full size, before a reduced decode
                if budget is not None:  # JPEG: decode at 1/2 to 1/8 scale (other formats ignore it)
                    src.draft(None, _stored(src, _target(path, stored, _orientation(src), budget)))
                src.load()
                # after decoding: TIFF's decoder turns the picture upright itself (and its size was upright)
                target = None if budget is None else _target(path, stored, _orientation(src), budget)
                im = _reducible(src)
                if target is not None:
                    need_w, need_h = _stored(im, target)
                    factor = min(im.width // need_w, im.height // need_h)
                    if factor >= 2:
                        im = im.reduce(factor)
                im = _eight_bit_rgb(ImageOps.exif_transpose(im))
        except MediaFailure:
            raise
        except (ValueError, SyntaxError) as e:  # what some PIL plugins raise for a malformed file
            raise MediaFailure(path, f"cannot decode: {e}") from e
    if target is None or im.size == target:
        return im
    return im.resize(target, Image.BICUBIC)


def _target(path: str, stored: tuple[int, int], orientation: int, budget: ImageBudget) -> tuple[int, int]:
    """The output (width, height) of the upright picture whose stored size is ``stored``."""
    width, height = stored
    if orientation in _TURNED:
        width, height = height, width
    try:
        h, w = budget.size(height, width)
    except ValueError as e:  # e.g. an aspect ratio no model grid takes: this image's problem
        raise MediaFailure(path, f"cannot resize: {e}") from e
    return w, h


def _orientation(im: Image.Image) -> int:
    from PIL import ExifTags

    return im.getexif().get(ExifTags.Base.Orientation, 1)


def _stored(im: Image.Image, target: tuple[int, int]) -> tuple[int, int]:
    """The smallest (width, height) to decode or reduce ``im`` to: :data:`REDUCING_GAP` times the
    upright ``target``, in ``im``'s stored orientation."""
    width, height = target
    if _orientation(im) in _TURNED:
        width, height = height, width
    return REDUCING_GAP * width, REDUCING_GAP * height


def _reducible(im: Image.Image) -> Image.Image:
    """``im`` in a mode ``Image.reduce`` averages correctly, converting only what has to be: 16-bit
    grayscale scaled to 8-bit ``L`` (``reduce`` takes no ``I;16``), palettes to RGB (averaging
    palette indices would mix unrelated colours), bilevel to ``L``."""
    from PIL import Image

    if im.mode.startswith("I;16"):
        import numpy as np

        pixels = np.asarray(im)  # uint16 in the file's byte order
        scaled = Image.fromarray((pixels >> 8).astype(np.uint8))  # 65535 -> 255, 0 -> 0
        scaled.info = dict(im.info)  # the EXIF orientation travels with the pixels
        return scaled
    if im.mode in ("P", "PA"):
        return im.convert("RGB")
    if im.mode == "1":
        return im.convert("L")
    return im


def _eight_bit_rgb(im: Image.Image) -> Image.Image:
    if im.mode in ("I", "F"):  # 32-bit: read as 16-bit values (see the module docstring)
        im = im.point(lambda v: v / 257).convert("L")
    return im if im.mode == "RGB" else im.convert("RGB")
