"""Draw the example images in assets/ with Pillow (no third-party images). Deterministic."""

from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

OUT = Path(__file__).resolve().parent.parent / "assets"


def font(size: int) -> ImageFont.ImageFont:
    return ImageFont.load_default(size=size)


def wide_street() -> Image.Image:
    """A 4:1 panorama: InternVL tiles it 1x4, Qwen gives a long thin token grid."""
    im = Image.new("RGB", (1600, 400), (135, 190, 235))
    d = ImageDraw.Draw(im)
    d.rectangle([0, 300, 1600, 400], fill=(70, 70, 70))
    for x in range(0, 1600, 80):
        d.rectangle([x + 20, 345, x + 50, 352], fill=(240, 240, 240))
    shops = [("BAKERY", (214, 120, 60)), ("BOOKS", (90, 120, 200)), ("CAFE 24h", (60, 160, 90)),
             ("PHARMACY", (200, 60, 80))]
    for i, (name, colour) in enumerate(shops):
        x = 40 + i * 390
        d.rectangle([x, 90, x + 330, 300], fill=colour, outline=(40, 40, 40), width=4)
        d.rectangle([x + 30, 110, x + 300, 160], fill=(250, 250, 240))
        d.text((x + 165, 135), name, fill=(20, 20, 20), font=font(36), anchor="mm")
        d.rectangle([x + 130, 200, x + 200, 300], fill=(60, 40, 30))
    d.ellipse([1450, 20, 1550, 120], fill=(255, 220, 80))
    return im


def bar_chart() -> Image.Image:
    """A chart with text: four quarters, labelled values."""
    im = Image.new("RGB", (640, 480), "white")
    d = ImageDraw.Draw(im)
    d.text((320, 30), "Sales per quarter (kEUR)", fill="black", font=font(26), anchor="mm")
    d.line([70, 420, 610, 420], fill="black", width=3)
    d.line([70, 420, 70, 70], fill="black", width=3)
    for i, (label, value) in enumerate([("Q1", 120), ("Q2", 180), ("Q3", 310), ("Q4", 240)]):
        x = 110 + i * 125
        top = 420 - value
        d.rectangle([x, top, x + 80, 420], fill=(66, 133, 244))
        d.text((x + 40, top - 18), str(value), fill="black", font=font(22), anchor="mm")
        d.text((x + 40, 445), label, fill="black", font=font(22), anchor="mm")
    return im


def shape(kind: str) -> Image.Image:
    """Two pictures to compare: a red circle and a blue square."""
    im = Image.new("RGB", (448, 448), (245, 245, 235))
    d = ImageDraw.Draw(im)
    if kind == "a":
        d.ellipse([94, 94, 354, 354], fill=(220, 40, 40))
        d.text((224, 410), "A", fill="black", font=font(30), anchor="mm")
    else:
        d.rectangle([94, 94, 354, 354], fill=(40, 80, 220))
        d.text((224, 410), "B", fill="black", font=font(30), anchor="mm")
    return im


if __name__ == "__main__":
    OUT.mkdir(exist_ok=True)
    wide_street().save(OUT / "wide-street.png", optimize=True)
    bar_chart().save(OUT / "bar-chart.png", optimize=True)
    shape("a").save(OUT / "shape-a.png", optimize=True)
    shape("b").save(OUT / "shape-b.png", optimize=True)
