"""The inspector: pure functions over the engine's rendered input (no Gradio, no vLLM).

``core``: ``inspect(rendered)`` -> ``Inspection`` (what the panels and ``inspect --json`` show), its JSON and
run-length text; ``prompt``: the highlighted prompt as HTML; ``pictures``: each image with its tiles / partitions /
28-px cells / crop drawn over it, a video's contact sheet, a clip's waveform with its token spans; ``cost``: what a page cost (vision tokens in, text tokens
out, their ratio). Multimodal items are keyed by modality ("image", "video", "audio"). Nothing here renders templates or
expands placeholders: every number comes from what vLLM produced.
"""

from .core import (Budget, Expansion, Inspection, clip_text, cut_seconds, feature_runs, inspect, prefill_work,
                   report_text, run_length_text, to_json)
from .reading_cost import DocumentCost, PageCost, cost_json, page_cost
from .pictures import GROUP_COLOURS, contact_sheet, draw_overlay, waveform
from .prompt import PROMPT_CSS, UNIFORM_TILE_FAMILIES, prompt_html, tile_counts

__all__ = ["GROUP_COLOURS", "PROMPT_CSS", "UNIFORM_TILE_FAMILIES", "Budget", "DocumentCost", "Expansion",
           "Inspection", "PageCost", "clip_text", "contact_sheet", "cost_json", "cut_seconds", "draw_overlay",
           "feature_runs", "inspect", "page_cost", "prefill_work", "prompt_html", "report_text", "run_length_text",
           "tile_counts", "to_json", "waveform"]
