"""Pictures of what the processor did: an image with its tiles, partitions, cells or crop drawn over it; a video's
sampled frames on a contact sheet with their groups and token grids."""

from __future__ import annotations

from PIL import Image, ImageDraw

from .core import Expansion


def draw_overlay(image: Image.Image, expansion: Expansion, center_crop: bool = False) -> Image.Image:
    """The image with what the processor did drawn over it: tile / partition / cell grid, or the crop."""
    out = image.convert("RGB").copy()
    draw = ImageDraw.Draw(out, "RGBA")
    w, h = out.size
    line = max(1, round(min(w, h) / 200))
    if expansion.grid is not None:
        rows, cols = expansion.grid
        for c in range(1, cols):
            x = round(c * w / cols)
            draw.line([(x, 0), (x, h)], fill=(255, 0, 80, 200), width=line)
        for r in range(1, rows):
            y = round(r * h / rows)
            draw.line([(0, y), (w, y)], fill=(255, 0, 80, 200), width=line)
        draw.rectangle([0, 0, w - 1, h - 1], outline=(255, 0, 80, 230), width=line * 2)
    elif center_crop and w != h:
        side = min(w, h)
        left, top = (w - side) // 2, (h - side) // 2
        draw.rectangle([0, 0, w, h], fill=(0, 0, 0, 110))
        out.paste(image.convert("RGB").crop((left, top, left + side, top + side)), (left, top))
        draw = ImageDraw.Draw(out, "RGBA")
        draw.rectangle([left, top, left + side - 1, top + side - 1], outline=(255, 0, 80, 230), width=line * 2)
    return out


GROUP_COLOURS = ((229, 57, 53), (30, 136, 229), (67, 160, 71), (251, 140, 0), (142, 36, 170), (0, 137, 123))
"""Border colours of successive frame groups on a video's contact sheet."""


def contact_sheet(expansion: Expansion, thumbnails: tuple[Image.Image, ...], columns: int = 3,
                  cell: int = 256) -> Image.Image:
    """A video's sampled frames side by side, each with its time, its group (frames of one group share a
    border colour) and the token grid of its group drawn over it (one cell per feature token)."""
    from PIL import ImageFont

    n = len(thumbnails)
    columns = max(1, min(columns, n))
    rows = -(-n // columns)
    w0, h0 = thumbnails[0].size
    frame_h = max(1, round(cell * h0 / w0))
    text_px = max(14, cell // 16)  # readable when the sheet is shown at a panel's width
    label_h = 2 * text_px + 12  # two lines: the frame and its time; its group and tokens
    sheet = Image.new("RGB", (columns * (cell + 8) + 8, rows * (frame_h + label_h + 8) + 8), (250, 250, 250))
    draw = ImageDraw.Draw(sheet, "RGBA")
    font = ImageFont.load_default(size=text_px)
    per_group = expansion.frames_per_group or 0
    for i, thumb in enumerate(thumbnails):
        x = 8 + (i % columns) * (cell + 8)
        y = 8 + (i // columns) * (frame_h + label_h + 8)
        sheet.paste(thumb.convert("RGB").resize((cell, frame_h)), (x, y))
        group = i // per_group if per_group else None
        colour = GROUP_COLOURS[group % len(GROUP_COLOURS)] if group is not None else (120, 120, 120)
        if expansion.grid is not None:
            g_rows, g_cols = expansion.grid
            for c in range(1, g_cols):
                gx = x + round(c * cell / g_cols)
                draw.line([(gx, y), (gx, y + frame_h)], fill=(255, 0, 80, 120), width=1)
            for r in range(1, g_rows):
                gy = y + round(r * frame_h / g_rows)
                draw.line([(x, gy), (x + cell, gy)], fill=(255, 0, 80, 120), width=1)
        draw.rectangle([x - 2, y - 2, x + cell + 1, y + frame_h + 1], outline=(*colour, 255), width=3)
        when = f"{expansion.timestamps_s[i]:.2f} s" if expansion.timestamps_s and i < len(expansion.timestamps_s) else ""
        tokens = (f"group {group + 1}: {expansion.groups[group]} tokens"
                  if group is not None and expansion.groups and group < len(expansion.groups) else "")
        draw.text((x, y + frame_h + 4), f"frame {i + 1} · {when}\n{tokens}", fill=(20, 20, 20), font=font,
                  spacing=4)
    return sheet
