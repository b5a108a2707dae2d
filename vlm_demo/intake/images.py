"""Image intake: every image reaches the engine as a decoded, checked, RGB Pillow image (or as checked precomputed
embeddings); vLLM never reads a path on the user's behalf."""

from __future__ import annotations

import base64
import hashlib
import io
import warnings
import weakref
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError
from safetensors import SafetensorError
from safetensors.numpy import load as load_safetensors

from ..errors import InputError
from ..settings import ENCODED_IMAGES_KEPT, Settings
from .cache import Recent


def load_image(source: str | Path | bytes | Image.Image, settings: Settings, name: str | None = None) -> Image.Image:
    """Decode and check one image; return it as RGB. Bad input raises ``InputError`` naming the image
    as ``name`` (default: the path given, or "the image").

    Animated images (GIF, WebP) give their first frame; transparency is flattened onto white;
    palette, CMYK, grey and 16-bit images are converted to 8-bit RGB; EXIF rotation is applied.
    """
    name = name or (str(source) if isinstance(source, (str, Path)) else "the image")
    if isinstance(source, Image.Image):
        image = source
    else:
        try:
            data = Path(source).read_bytes() if isinstance(source, (str, Path)) else source
        except OSError as exc:
            raise InputError(f"cannot read {name}: {exc.strerror}") from None
        image = _decode(data, str(name), settings)
    _check_size(image, str(name), settings)
    if image is source:  # the caller's: a turned copy
        image = ImageOps.exif_transpose(image)
    else:  # decoded here: turned in place (no copy of an image that needs no turn: 1.7 ms at 1280x720)
        ImageOps.exif_transpose(image, in_place=True)
    if image.mode != "RGB":
        image = _to_rgb(image)
    return image



def image_digest(image: Image.Image) -> str:
    """A name for an image's pixels (mode, size and bytes): equal pictures get equal names. Kept while the image
    lives (the app never changes a picture in place once read): a document's pages are named at every render, 12 ms
    each at 144 dpi."""
    found = _DIGESTS.get(id(image))
    if found is None:
        h = hashlib.blake2b(f"{image.mode} {image.size}".encode(), digest_size=16)
        h.update(image.tobytes())
        found = _DIGESTS[id(image)] = h.hexdigest()
        weakref.finalize(image, _DIGESTS.pop, id(image), None)
    return found


_DIGESTS: dict[int, str] = {}
"""Each live image's digest, by its ``id`` (a finalizer drops it with the image: PIL images are not hashable)."""


_PNG_URLS = Recent(ENCODED_IMAGES_KEPT)


def png_data_url(image: Image.Image) -> str:
    """A decoded image as a lossless base64 PNG ``data:`` URL: how images travel to a remote server (and
    into exported requests), so the server decodes the very pixels the app checked and fetches nothing.
    Fast compression (level 1 encodes several times faster), and kept by content: every turn re-sends the
    conversation's earlier images."""
    def encode() -> str:
        buffer = io.BytesIO()
        image.save(buffer, format="PNG", compress_level=1)
        return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")
    return _PNG_URLS.get(image_digest(image), encode)  # type: ignore[return-value]


def _decode(data: bytes, name: str, settings: Settings) -> Image.Image:
    if len(data) > settings.max_upload_bytes:
        raise InputError(f"{name}: file is larger than {settings.max_upload_bytes:,} bytes")
    Image.MAX_IMAGE_PIXELS = settings.max_image_pixels
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            image = Image.open(io.BytesIO(data))
            if image.format not in settings.allowed_image_formats:
                allowed = ", ".join(settings.allowed_image_formats)
                raise InputError(f"{name}: {image.format} images are not accepted (use {allowed})")
            _check_size(image, name, settings)
            image.load()  # an animation loads its first frame, where Pillow opens it
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise InputError(f"{name}: image is too large (over {settings.max_image_pixels:,} pixels)") from None
    except UnidentifiedImageError:
        kind = "an SVG drawing (vector images are not accepted)" if b"<svg" in data[:4096].lower() else "not an image"
        raise InputError(f"{name}: {kind}; use {', '.join(settings.allowed_image_formats)}") from None
    except (OSError, SyntaxError, ValueError) as exc:
        raise InputError(f"{name}: broken image ({exc})") from None
    return image


def _check_size(image: Image.Image, name: str, settings: Settings) -> None:
    w, h = image.size
    if w < 1 or h < 1:
        raise InputError(f"{name}: empty image")
    if w * h > settings.max_image_pixels:
        raise InputError(f"{name}: image is too large ({w}x{h}; limit {settings.max_image_pixels:,} pixels)")


def _to_rgb(image: Image.Image) -> Image.Image:
    """Flatten transparency onto white; convert palette, CMYK, grey and 16-bit modes to RGB."""
    if image.mode in ("I;16", "I;16B", "I;16L", "I"):
        image = image.point(lambda v: v / 256).convert("L")
    if image.mode == "P":
        image = image.convert("RGBA")
    if image.mode in ("RGBA", "LA"):
        background = Image.new("RGB", image.size, (255, 255, 255))
        background.paste(image, mask=image.getchannel("A"))
        return background
    return image.convert("RGB")


@dataclass(frozen=True)
class ImageEmbeds:
    """Precomputed image features for one image (LLaVA-1.5, Qwen2.5-VL), read from .safetensors."""

    tensors: dict[str, np.ndarray]
    """``image_embeds`` [tokens, hidden] and, for Qwen2.5-VL, ``image_grid_thw`` [3]."""

    @property
    def num_tokens(self) -> int:
        """Feature vectors, i.e. image tokens in the prompt."""
        return int(self.tensors["image_embeds"].shape[0])


EMBEDS_KEYS = frozenset({"image_embeds", "image_grid_thw"})


def load_image_embeds(path: str | Path, settings: Settings) -> ImageEmbeds:
    """Read image embeddings from a .safetensors file (never pickle / ``torch.load``)."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror}") from None
    if len(data) > settings.max_upload_bytes:
        raise InputError(f"{path}: file is larger than {settings.max_upload_bytes:,} bytes")
    try:
        tensors = load_safetensors(data)
    except (SafetensorError, ValueError, OSError) as exc:
        raise InputError(f"{path}: not a .safetensors file ({exc})") from None
    if "image_embeds" not in tensors or not set(tensors) <= EMBEDS_KEYS:
        raise InputError(f"{path}: expected tensors 'image_embeds' (and 'image_grid_thw'), got {sorted(tensors)}")
    embeds = tensors["image_embeds"]
    if embeds.ndim != 2 or embeds.shape[0] < 1 or embeds.dtype.kind != "f":
        raise InputError(f"{path}: 'image_embeds' must be a 2-D float tensor [tokens, hidden], got "
                         f"{embeds.dtype} {list(embeds.shape)}")
    if "image_grid_thw" in tensors:
        grid = tensors["image_grid_thw"].reshape(-1)
        if grid.size != 3 or grid.dtype.kind not in "iu" or (grid <= 0).any():
            raise InputError(f"{path}: 'image_grid_thw' must hold three positive integers")
        tensors = {**tensors, "image_grid_thw": grid.astype(np.int64)}
    return ImageEmbeds(tensors)
