"""InternVL's tile-grid search, written once for both InternVL formats: the grid of square tiles whose aspect
ratio is closest to an image's.

The two processors search alike but list their candidate grids in different orders, and the order decides a tie
between two grids of the same tile count (min 10, max 11 tiles, a 2500x400 image: 10x1 for vLLM's ``internvl_chat``
processor, 5x2 for transformers' GotOcr2), so each format names its own candidates.
"""

from __future__ import annotations

from collections.abc import Iterable


def chat_grids(min_num: int, max_num: int) -> list[tuple[int, int]]:
    """vLLM's ``get_internvl_target_ratios`` (``internvl_chat``): a set of (columns, rows) sorted by tile count."""
    ratios = {(i, j) for n in range(min_num, max_num + 1) for i in range(1, n + 1) for j in range(1, n + 1)
              if min_num <= i * j <= max_num}
    return sorted(ratios, key=lambda r: r[0] * r[1])


def hf_grids(min_patches: int, max_patches: int) -> list[tuple[int, int]]:
    """transformers' ``get_all_supported_aspect_ratios`` (GotOcr2, HF-format InternVL): (columns, rows) listed
    column by column, sorted by tile count."""
    grids = [(c, r) for c in range(1, max_patches + 1) for r in range(1, max_patches + 1)
             if min_patches <= c * r <= max_patches]
    return sorted(grids, key=lambda g: g[0] * g[1])


def closest_grid(width: int, height: int, grids: Iterable[tuple[int, int]], tile: int) -> tuple[int, int]:
    """(columns, rows) of the tile grid for an image: InternVL's ``find_closest_aspect_ratio`` (GotOcr2's
    ``get_optimal_tiled_canvas``). On a tie the later grid wins while the image covers over half its area."""
    best, best_diff = (1, 1), float("inf")
    for cols, rows in grids:
        diff = abs(width / height - cols / rows)
        if diff < best_diff:
            best, best_diff = (cols, rows), diff
        elif diff == best_diff and width * height > 0.5 * tile * tile * cols * rows:
            best = (cols, rows)
    return best
