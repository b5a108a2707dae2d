"""What a family adapter is: everything the app knows about one family of vision-language models.

One module per family in this package defines ``ADAPTER = Adapter(...)``; the package discovers them
(nothing lists them by hand). A model with no adapter goes through ``generic``, which asks vLLM.
Adapters import no vLLM code: the engine layer hands them the processor's output as plain tensors. Nor do they
import transformers: a family's tiny offline model is built by ``vlm_demo.tiny_models.<family>``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from PIL import Image

from .box_formats import Grounding


@dataclass(frozen=True)
class ItemGeometry:
    """How the engine's processor treated one image (or video), as far as the family's rule tells."""

    orig_size: tuple[int, int] | None
    """Width and height of the input as uploaded (None for precomputed embeddings)."""
    processed_size: tuple[int, int] | None
    """Width and height the vision encoder saw (resized / tiled canvas), where the family resizes."""
    grid: tuple[int, int] | None
    """Rows and columns: tiles, partitions, crops or token cells; None where there is no grid."""
    thumbnail: bool | None
    """Whether a global (thumbnail) view was added to the tiles; None where there is no such view."""
    groups: tuple[int, ...] | None = None
    """Videos: feature tokens per group of sampled frames that became tokens together (Qwen2.5-VL: two
    frames per temporal patch; InternVL: one frame each), where the family's rule tells; None: the
    inspector reads the groups from the runs of the feature token in the ids."""
    feature_frames: int | None = None
    """Clips: the feature extractor's frames the model takes (Whisper-style: 100 a second), after its cap."""
    heard_s: float | None = None
    """Clips: the seconds of the clip those frames cover (a family's cap cuts the rest: Qwen2-Audio's 30 s)."""


def no_geometry(image: Image.Image | None) -> ItemGeometry:
    """The geometry of an input whose processing the app cannot describe: its size only."""
    return ItemGeometry(image.size if image is not None else None, None, None, None)


@dataclass(frozen=True)
class Control:
    """One per-request processor kwarg a family offers (``mm_processor_kwargs``), with its type."""

    kwarg: str
    """The kwarg's name, as vLLM's processor takes it (``max_pixels``, ``do_pan_and_scan``)."""
    kind: Literal["int", "bool"] = "int"
    """``int``: a slider between ``min`` and ``max``; ``bool``: a checkbox."""
    min: int | None = None
    """Smallest value the processor accepts (int controls)."""
    max: int | None = None
    """Largest value the processor accepts (int controls)."""
    sizes_cache: bool = False
    """The value sizes the engine's encoder cache: the engine starts with the registry's largest."""
    default: int | bool | None = None
    """The real checkpoint's own value (its processor config), where the page starts the control."""
    label: str = ""
    """Text beside the control (the kwarg's name where empty), for an entry that lists no controls."""
    step: int = 1
    """Slider step (int controls)."""


@dataclass(frozen=True)
class Task:
    """One of a reader's documented prompts (its checkpoint's own wording), offered in a task picker that fills the
    question, editable."""

    name: str
    """What the picker shows ("Convert to Markdown", "OCR", "Layout", "Table", "Formula", "Locate ...")."""
    prompt: str
    """The exact text the checkpoint expects beside the page (the image goes where the chat template puts it); a
    ``{what}`` in it is where the person names what to find (Locate)."""
    source: str
    """Where the wording comes from (the checkpoint's README or code), so it can be checked."""


@dataclass(frozen=True)
class KnownCount:
    """One item's feature-token count of the real checkpoint, which the tiny model must give too (the
    item's modality is its key in ``Adapter.known_counts``)."""

    size: tuple[int, int] | float
    """Width and height of the test image; a clip's seconds (a 440-Hz tone at 48 kHz, stereo)."""
    count: int
    """Feature tokens (ids equal to the modality's feature token) the real checkpoint's processor gives."""
    source: str
    """Where the number comes from (the processor rule and config values that give it)."""
    mm_kwargs: Mapping[str, Any] = field(default_factory=dict)
    """Per-request kwargs for this case."""


#: geometry(fields, image, hf_config, mm_kwargs): ``fields`` is one item's processor output
#: ({name: tensor}), ``image`` the decoded input (None for embeddings); None when the rule does not apply.
GeometryFn = Callable[[Mapping[str, Any], "Image.Image | None", Any, Mapping[str, Any]], "ItemGeometry | None"]
#: geometry_from_count(count, item, mm_kwargs): the geometry a remote server's count implies for the item (a picture;
#: a clip as sent: ``engine.SentClip``), or None.
CountGeometryFn = Callable[[int, Any, Mapping[str, Any]], "ItemGeometry | None"]


@dataclass(frozen=True)
class Adapter:
    """Everything the app knows about one family. Only ``name`` and ``title`` are required: what an
    adapter leaves out, the app takes from vLLM at run time (as for a model with no adapter).

    What differs by modality is a mapping keyed by vLLM's modality names (``"image"``, ``"video"``), as
    vLLM's own processing info is (``get_placeholder_str(modality, i)``): an adapter lists the modalities
    it knows (each field says what a modality left out gets), and a new modality adds entries, not fields.
    """

    name: str
    """Key used in ``models.yaml`` (``family:``) and on the command line."""
    title: str
    """Human name of the family."""
    model_types: tuple[str, ...] = ()
    """``model_type`` values in config.json of this family's checkpoints (how ``family: auto`` finds it)."""
    architectures: tuple[str, ...] = ()
    """config.json ``architectures`` of this family's checkpoints, for a family whose ``model_type`` is another's
    (LightOnOCR's checkpoints say ``mistral3``; vLLM picks the model class by architecture): matched before any
    ``model_type``."""
    feature_tokens: Mapping[str, str] = field(default_factory=dict)
    """Per modality, the token that fills an item's placeholder range after expansion (a modality left out:
    the id that fills vLLM's ranges). A remote server without the render endpoint gives ids only: the image
    ranges are derived from runs of the image's (with ``markers``)."""
    placeholders: Mapping[str, str] = field(default_factory=dict)
    """Per modality, the text standing for one item in the chat template's output, before expansion (a
    modality left out: asked of vLLM's model class, else its HF processor's ``<modality>_token``)."""
    controls: tuple[Control, ...] = ()
    """Per-request processor kwargs the family offers; registry controls must be among them."""
    aliases: Mapping[str, str] = field(default_factory=dict)
    """Control names people know -> the kwarg the processor's current API takes for them, sent instead
    (Qwen's ``max_pixels`` -> ``size.longest_edge``: transformers 5.19 deprecates the pixel kwargs). A dotted
    target is a key of a dict kwarg, sent whole (the other keys at the checkpoint's values: the controls'
    defaults)."""
    center_crop: bool = False
    """The processor center-crops to a square (the picture shows the crop)."""
    markers: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    """Per modality, the tokens that open and close an item's range around its feature tokens ("" for
    none; a modality left out has none): what widens a run of the feature token to the item's range where
    the ranges are derived from ids (a remote server without the render endpoint)."""
    ranges_from_ids: bool = True
    """Whether image ranges can be derived from the expanded ids at all (runs of the image feature token
    plus the image markers). Only images are: a video's ranges need the server's render endpoint."""
    geometry: Mapping[str, GeometryFn] = field(default_factory=dict)
    """Per modality, the item's geometry from the engine's processor output. ``image``: the tiles or grid
    drawn over it; ``video`` (``image``: the video's first sampled frame): the per-frame processed size,
    the token grid of one group, and tokens per group. A modality left out: its size only (videos: the
    groups are read from the ids); no ``image`` rule: the page says there is no geometry adapter."""
    grounding: Grounding | None = None
    """The format of the boxes and points in the family's answers ("where is X" in Detect mode, or a document
    reader's layout cells: ``families.box_formats``), or None."""
    video_sampling: Literal["num_frames", "fps"] = "num_frames"
    """How vLLM's video loader for this family picks frames: ``num_frames`` spread evenly (``fps``, where
    given, caps them), or ``fps`` alone (vLLM 0.32's Qwen2-VL, Qwen2.5-VL and Qwen3-VL loaders port the HF
    processors' sampling: frames = duration x fps, at least 4, ``num_frames`` ignored)."""
    geometry_from_count: Mapping[str, CountGeometryFn] = field(default_factory=dict)
    """Per modality, an item's geometry from its size (a clip's length), the kwargs and a remote server's token
    count (a modality left out: its size only)."""
    unexpand: Callable[[str], str] | None = None
    """The chat template's output from the decoded expanded prompt (each item's expansion back to its
    placeholder), for families whose expansion merges into the text around it (Gemma 3's newlines): a
    remote server gives ids only. None: each item's range stands for its placeholder."""
    rules: Mapping[str, str] = field(default_factory=dict)
    """Per modality, how an item's count comes about, in words, where it is one rule for every item (a clip's:
    "25 tokens a second: ..."); the expansion shows it beside the item."""
    known_counts: Mapping[str, tuple[KnownCount, ...]] = field(default_factory=dict)
    """Per modality, feature-token counts of the real checkpoint, asserted on the tiny model by the tests."""
    breaks: Callable[[tuple[int, int] | None], Mapping[str, int]] | None = None
    """Per image, from its grid (rows, columns; None: none), the positions vLLM fills with the feature token's own id
    that are no vision features, by kind (DeepSeek-OCR: {"row newline": 46, "view separator": 1}): what a page's
    "vision tokens in" leaves out. None: every feature-token position is a feature (other ids tell markers apart)."""
    tasks: tuple[Task, ...] = ()
    """A document reader's documented prompts (the first is the picker's default); empty for a chat model."""
    document_dpi: int | None = None
    """The resolution the checkpoint's own documentation rasterises document pages at (a reader's recipe), where
    it names one; None: the app's ``DOCUMENT_DPI``."""
    fixed_geometry: str = ""
    """For a family whose processing vLLM fixes (no per-request kwarg changes its tokens: DeepSeek-OCR's Gundam
    mode), that geometry in words, where a family with controls shows its sliders; "" for the others."""

    def control(self, kwarg: str) -> Control | None:
        """The control for ``kwarg``, if the family offers it."""
        return next((c for c in self.controls if c.kwarg == kwarg), None)

    @property
    def cache_sizing_kwargs(self) -> frozenset[str]:
        """Kwargs whose largest value the engine must start with."""
        return frozenset(c.kwarg for c in self.controls if c.sizes_cache)
