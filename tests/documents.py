"""Test documents, made here (no file from outside): a PDF of pages drawn with Pillow (text, a table, a figure), and
hand-written PDFs for what Pillow will not write (encrypted, no pages, a 200-inch page)."""

from __future__ import annotations

from pathlib import Path

from PIL import Image, ImageDraw


def page_picture(number: int, size_pt: tuple[int, int] = (595, 842)) -> Image.Image:
    """One page at 72 dpi (one pixel a point): a title, lines of text, a table and a figure."""
    w, h = size_pt
    image = Image.new("RGB", (w, h), "white")
    draw = ImageDraw.Draw(image)
    draw.text((50, 40), f"Quarterly report - page {number}", fill="black")
    for i in range(12):
        draw.text((50, 80 + 14 * i), f"Line {i + 1} of page {number}: revenue grew by {3 * i + number} percent.",
                  fill="black")
    top = 270
    for row in range(4):  # a table
        for col in range(3):
            draw.rectangle((50 + 150 * col, top + 24 * row, 200 + 150 * col, top + 24 * (row + 1)), outline="black")
            draw.text((56 + 150 * col, top + 6 + 24 * row), f"r{row}c{col}={row * col + number}", fill="black")
    for i in range(8):  # a figure: bars
        height = 20 + (i * 37 + number * 11) % 120
        draw.rectangle((60 + 50 * i, h - 80 - height, 90 + 50 * i, h - 80), fill=(40 + 25 * i, 90, 180))
    return image


def make_pdf(path: Path, pages: int = 3, size_pt: tuple[int, int] = (595, 842)) -> Path:
    """A PDF of ``pages`` A4 pages (595 x 842 pt) by default."""
    pictures = [page_picture(n + 1, size_pt) for n in range(pages)]
    pictures[0].save(path, save_all=True, append_images=pictures[1:], resolution=72.0)
    return path


def raw_pdf(objects: list[str], trailer: str = "") -> bytes:
    """A PDF written object by object, with its cross-reference table."""
    out = b"%PDF-1.4\n"
    offsets = []
    for i, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += f"{i} 0 obj\n{body}\nendobj\n".encode()
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{offset:010d} 00000 n \n".encode() for offset in offsets)
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R {trailer}>>\nstartxref\n{xref}\n%%EOF\n".encode()
    return out


CATALOG = "<< /Type /Catalog /Pages 2 0 R >>"
ONE_PAGE = "<< /Type /Pages /Kids [3 0 R] /Count 1 >>"
ZEROS = "<" + "00" * 32 + ">"

ENCRYPTED = raw_pdf([CATALOG, ONE_PAGE, "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>",
                     f"<< /Filter /Standard /V 1 /R 2 /O {ZEROS} /U {ZEROS} /P -4 >>"],
                    f"/Encrypt 4 0 R /ID [<{'ab' * 16}> <{'ab' * 16}>] ")
"""A PDF whose empty user password is wrong: it opens only with a password."""
NO_PAGES = raw_pdf([CATALOG, "<< /Type /Pages /Kids [] /Count 0 >>"])
"""A PDF with an empty page tree."""
HUGE_PAGE = raw_pdf([CATALOG, ONE_PAGE, "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 14400 14400] >>"])
"""One 200 x 200 inch page."""


def many_pages(count: int) -> bytes:
    """A PDF of ``count`` blank letter pages (one page object shared by the tree: small however many)."""
    kids = " ".join("3 0 R" for _ in range(count))
    return raw_pdf([CATALOG, f"<< /Type /Pages /Kids [{kids}] /Count {count} >>",
                    "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>"])
