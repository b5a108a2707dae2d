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


CLIP_COLOURS = ((38, 166, 154), (0, 105, 92))
"""Fill of a clip's waveform in alternate token spans (the budget bar's audio colour, and a darker one)."""


def waveform(expansion: Expansion, peaks: tuple[float, ...], width: int = 960, height: int = 240) -> Image.Image:
    """A clip's waveform over its whole length with its tokens' spans marked as a picture's grid is drawn over it:
    alternate spans of ``step`` tokens in alternate colours, each labelled with its first position in the prompt;
    what the family's cap cut greyed out and named."""
    from PIL import ImageFont

    from .core import cut_seconds

    text_px = 16
    top, bottom = 2 * text_px + 12, text_px + 14  # (a title line and a range line; the positions below)
    out = Image.new("RGB", (width, height), (250, 250, 250))
    draw = ImageDraw.Draw(out, "RGBA")
    font = ImageFont.load_default(size=text_px)
    seconds = expansion.seconds or expansion.heard_s or 1.0
    heard = expansion.heard_s if expansion.heard_s is not None else seconds
    x_of = lambda s: round(min(s, seconds) / seconds * (width - 1))  # noqa: E731
    mid, half = (top + height - bottom) // 2, (height - bottom - top) // 2 - 2
    n = max(1, expansion.count)
    step = next((k for k in (1, 5, 10, 25, 50, 100, 250, 500) if n / k <= 16), 1000)
    per_token = heard / n
    for k, first in enumerate(range(0, n, step)):
        x0, x1 = x_of(first * per_token), x_of(min(n, first + step) * per_token)
        draw.rectangle([x0, top, x1, height - bottom], fill=(*CLIP_COLOURS[k % 2], 28))
        colour = CLIP_COLOURS[k % 2]
        for i, peak in enumerate(peaks):
            x = round(i / len(peaks) * (width - 1))
            if x0 <= x < x1 or (x1 == width - 1 and x == x1):
                h = max(1, round(peak * half))
                draw.line([(x, mid - h), (x, mid + h)], fill=colour, width=max(1, width // len(peaks)))
        if x1 - x0 >= 44 or k % 2 == 0:
            draw.text((x0 + 2, height - bottom + 4), f"{expansion.offset + first:,}", fill=(60, 60, 60), font=font)
    cut = cut_seconds(expansion)
    if cut:
        x = x_of(heard)
        for i, peak in enumerate(peaks):
            px = round(i / len(peaks) * (width - 1))
            if px > x:
                h = max(1, round(peak * half))
                draw.line([(px, mid - h), (px, mid + h)], fill=(170, 170, 170), width=max(1, width // len(peaks)))
        draw.rectangle([x, top, width - 1, height - bottom], fill=(120, 120, 120, 60))
        draw.line([(x, top), (x, height - bottom)], fill=(229, 57, 53), width=3)
        draw.text((x + 6, top + 4), f"not heard: the last {cut:.1f} s", fill=(183, 28, 28), font=font)
    title = f"{expansion.name or 'clip'}: {seconds:.1f} s, {n:,} tokens at {expansion.offset:,}-" \
            f"{expansion.offset + expansion.length - 1:,}; spans of {step} token{'s' if step != 1 else ''}"
    draw.text((4, 4), title, fill=(30, 30, 30), font=font)
    draw.text((4, 4 + text_px + 4), f"{heard:.1f} s heard" + (f" of {seconds:.1f}" if cut else ""),
              fill=(30, 30, 30), font=font)
    return out
