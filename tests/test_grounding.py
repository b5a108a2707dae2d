"""Grounding: every family's format parsed (cut-off and malformed answers too), mapped to the original
picture with the processor's own geometry, drawn where it belongs."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest
from PIL import Image

from vlm_demo import families
from vlm_demo.families.box_formats import DEEPSEEK_OCR, DOTS_OCR, INTERNVL, LIGHTONOCR_BBOX, QWEN2_5_VL, QWEN2_VL, QWEN3_VL, Found
from vlm_demo.grounding import COLOURS, Placed, colour_of, draw, place, rows, to_json

from .conftest import make_image, run_cli


@pytest.mark.parametrize("fmt, text, expected", [
    (QWEN2_5_VL, '[{"bbox_2d": [10, 20, 110, 220], "label": "cat"}, {"point_2d": [5, 6], "label": "eye"}]',
     [Found("cat", box=(10, 20, 110, 220)), Found("eye", point=(5, 6))]),
    (QWEN2_5_VL, '```json\n[\n  {"bbox_2d": [110, 220, 10, 20], "label": "dog"}\n]\n```',  # swapped corners
     [Found("dog", box=(10, 20, 110, 220))]),
    (QWEN2_5_VL, '[{"bbox_2d": [1, 2, 3, 4], "label": "a"}, {"bbox_2d": [5, 6, 7', [Found("a", box=(1, 2, 3, 4))]),
    (QWEN2_5_VL, '[{"bbox_2d": [1, 2, 3], "label": "three"}, {"bbox_2d": [1, "x", 3, 4]}, {"label": "none"}]', []),
    (QWEN2_5_VL, '<points x1="10" y1="20" x2="30" y2="40" alt="cups">cups</points>',
     [Found("cups", point=(10, 20)), Found("cups", point=(30, 40))]),
    (QWEN2_5_VL, '<points x1="10" y1="20" alt="cut', []),
    (QWEN3_VL, '{"bbox_2d": [100, 200, 300, 400], "label": "car"}', [Found("car", box=(100, 200, 300, 400))]),
    (QWEN2_VL, "<|object_ref_start|>the red car<|object_ref_end|><|box_start|>(100,200),(300,400)<|box_end|>",
     [Found("the red car", box=(100, 200, 300, 400))]),
    (QWEN2_VL, "<|object_ref_start|>car<|object_ref_end|><|box_start|>(300,400),(100,200)<|box_end|>"
               "<|box_start|>(1,2),(3,4)<|box_end|><|box_start|>(5,6),(7", [
         Found("car", box=(100, 200, 300, 400)), Found("car", box=(1, 2, 3, 4))]),
    (QWEN2_VL, "<|box_start|>(1,2),(3)<|box_end|>", []),
    (INTERNVL, "<ref>cat</ref><box>[[10, 20, 110, 220], [300, 310, 320, 330]]</box> and <ref>dog</ref><box>[[1, 2, 3",
     [Found("cat", box=(10, 20, 110, 220)), Found("cat", box=(300, 310, 320, 330))]),
    (INTERNVL, "<ref>cat</ref><box>[[10, 20, 110], [5, 6, 7, 8, 9]]</box>", []),
], ids=["qwen25-json", "qwen25-fence-swapped", "qwen25-cut", "qwen25-malformed", "qwen25-points",
        "qwen25-points-cut", "qwen3-json", "qwen2-tokens", "qwen2-many-and-cut", "qwen2-malformed",
        "internvl-many-and-cut", "internvl-malformed"])
def test_formats_parse_complete_items_only(fmt, text, expected):
    assert list(fmt.parse(text)) == expected
    for cut in range(len(text)):  # a stream cut anywhere never raises
        fmt.parse(text[:cut])


def test_every_grounding_family_says_its_format():
    named = {name: a.grounding for name, a in families.ADAPTERS.items() if a.grounding}
    assert named == {"qwen2_5_vl": QWEN2_5_VL, "qwen3_vl": QWEN3_VL, "qwen2_vl": QWEN2_VL, "internvl": INTERNVL,
                     "internvl_hf": INTERNVL, "deepseek_ocr": DEEPSEEK_OCR, "deepseek_ocr2": DEEPSEEK_OCR,
                     "lightonocr": LIGHTONOCR_BBOX, "dots_ocr": DOTS_OCR}


@pytest.mark.parametrize("orig, processed, box, expected", [
    ((1000, 500), (1008, 504), (0, 0, 1008, 504), (0, 0, 1000, 500)),
    ((640, 480), (364, 252), (91, 63, 182, 126), (160, 120, 320, 240)),
])
def test_qwen25_maps_processed_pixels_to_the_picture(orig, processed, box, expected):
    (placed,) = place([Found("x", box=box)], QWEN2_5_VL, orig, processed)
    assert placed.box == pytest.approx(expected)


def test_relative_formats_map_thousandths():
    (placed,) = place([Found("x", box=(250, 500, 750, 1000))], INTERNVL, (640, 480), None)
    assert placed.box == pytest.approx((160, 240, 480, 480))


def test_out_of_range_items_are_left_out():
    found = [Found("big", box=(0, 0, 1001, 10)), Found("neg", box=(-1, 0, 10, 10)), Found("flat", box=(5, 5, 5, 9)),
             Found("far", point=(2000, 3)), Found("ok", point=(500, 500))]
    assert [p.label for p in place(found, QWEN3_VL, (100, 100), None)] == ["ok"]
    assert place([Found("x", box=(1, 2, 3, 4))], QWEN2_5_VL, (100, 100), None) == ()  # processed size unknown


def test_a_box_given_the_other_way_round_is_the_rectangle_between_its_corners():
    """[x2, y2, x1, y1] (or one axis reversed): drawn between its corners, as Qwen's cookbook draws it; random
    weights write such boxes in most Detect answers, and the page drew nothing (CI's Detect tests waited for it)."""
    found = [Found("back", box=(750, 1000, 250, 500)), Found("half", box=(250, 1000, 750, 500))]
    assert [p.box for p in place(found, INTERNVL, (640, 480), None)] == [pytest.approx((160, 240, 480, 480))] * 2


def test_drawn_where_the_box_is():
    image = make_image(400, 300)
    placed = (Placed("cat", box=(100.0, 50.0, 300.0, 250.0)), Placed("dog", point=(30.0, 280.0)))
    out = draw(image, placed)
    assert out.size == image.size
    assert out.getpixel((100, 150)) == colour_of("cat", ["cat", "dog"]) == COLOURS[0]  # the left edge
    assert out.getpixel((200, 150)) == image.getpixel((200, 150))  # inside: the picture itself
    assert out.getpixel((30, 280)) == COLOURS[1]
    assert rows(placed) == [["cat", 100.0, 50.0, 300.0, 250.0], ["dog", 30.0, 280.0, 30.0, 280.0]]
    assert to_json("m", QWEN3_VL, (400, 300), None, placed) == {
        "model": "m", "image_size": [400, 300], "processed_size": None, "format": "qwen3-vl-json",
        "boxes": [{"label": "cat", "box": [100.0, 50.0, 300.0, 250.0]}],
        "points": [{"label": "dog", "point": [30.0, 280.0]}]}


@pytest.mark.parametrize("fmt", [QWEN2_5_VL, QWEN3_VL, QWEN2_VL, INTERNVL], ids=lambda f: f.name)
def test_detect_grammar_admits_what_the_parser_reads(fmt):
    import re

    regex = fmt.detect_regex("red car", (600, 100))
    sample = {
        QWEN2_5_VL.name: '[{"bbox_2d": [12, 34, 560, 78], "label": "red car"}]',
        QWEN3_VL.name: '[{"bbox_2d": [12, 34, 560, 78], "label": "red car"}, {"bbox_2d": [1, 2, 3, 4], "label": "red car"}]',
        QWEN2_VL.name: "<|object_ref_start|>red car<|object_ref_end|><|box_start|>(12,34),(560,78)<|box_end|>",
        INTERNVL.name: "<ref>red car</ref><box>[[12, 34, 560, 78]]</box>",
    }[fmt.name]
    assert re.fullmatch(regex, sample)
    assert not re.fullmatch(regex, sample.replace("560", "601"))  # x beyond the bounds
    assert not re.fullmatch(regex, sample.replace("78", "101"))  # y beyond the bounds
    assert fmt.parse(sample)[0] == Found("red car", box=(12, 34, 560, 78))
    assert "red car" in fmt.detect_prompt("red car")


async def test_qwen25_boxes_map_through_the_processors_own_size(registry, engines, settings):
    """Qwen2.5-VL answers in pixels of the image its processor resized: with a max_pixels that makes that size
    differ from the picture's, ``ground --answer``'s mapping uses the engine's processed size (from
    ``image_grid_thw``), so a box over the whole processed image covers the whole picture."""
    from vlm_demo.service import ChatRequest, ChatService, Turn

    service = ChatService(registry, engines, settings)
    picture = make_image(1600, 400)
    request = ChatRequest(model="tiny-qwen2.5-vl", turns=(Turn("user", "Where?", {"image": (picture,)}),),
                          mm_kwargs={"max_pixels": 100352})
    (image,) = (await service.inspect(request, start_engine=False)).items["image"]
    pw, ph = image.processed_size
    assert (pw, ph) != picture.size and pw * ph <= 100352
    answer = f'```json\n[{{"bbox_2d": [0, 0, {pw}, {ph}], "label": "all"}}, {{"point_2d": [{pw / 2}, {ph / 2}]}}]\n```'
    whole, middle = place(QWEN2_5_VL.parse(answer), QWEN2_5_VL, image.orig_size, image.processed_size)
    assert whole.box == pytest.approx((0, 0, 1600, 400)) and middle.point == pytest.approx((800, 200))


@pytest.mark.engine
async def test_detect_mode_on_the_engine(registry, engines, settings):
    """Detect mode with the tiny (random-weight) Qwen2.5-VL and InternVL: vLLM's structured outputs hold the
    answer to the family's grammar, every number inside the format's space (Qwen2.5-VL: the processed size the
    render gave), so whatever the weights, every item parses and lands inside the picture."""
    import dataclasses

    from vlm_demo.service import ChatRequest, ChatService, Done, Failed, Rendered, Turn, detect_request

    service = ChatService(registry, engines, settings)
    picture = make_image(640, 480)
    for model in ("tiny-qwen2.5-vl", "tiny-internvl2.5"):
        spec = registry.get(model)
        base = ChatRequest(model=model, turns=(Turn("user", "", {"image": (picture,)}),),
                           sampling=dataclasses.replace(spec.sampling, max_tokens=80, seed=1))
        request = detect_request(base, service.profile(model), "the yellow band")
        events = [e async for e in service.chat(request)]
        assert not any(isinstance(e, Failed) for e in events), events
        done = events[-1]
        assert isinstance(done, Done)
        grounding = families.get(spec.family).grounding
        image = next(e for e in events if isinstance(e, Rendered)).inspection.items["image"][-1]
        found = grounding.parse(done.answer)
        assert found and found[0].label == "the yellow band", done.answer
        placed = place(found, grounding, image.orig_size, image.processed_size)
        assert len(placed) == sum(1 for f in found if f.box[0] < f.box[2] and f.box[1] < f.box[3])
        sent = next(e for e in events if isinstance(e, Rendered)).sampling
        assert sent.regex == grounding.detect_regex("the yellow band", grounding.bounds(image.processed_size))
        for item in placed:
            x1, y1, x2, y2 = item.box
            assert 0 <= x1 < x2 <= 640 and 0 <= y1 < y2 <= 480


DOCUMENTED_EXAMPLES = [  # docs/grounding.md's documented example of each format, on assets/bar-chart.png (640x480)
    ("tiny-qwen2.5-vl", ["--mm-kwargs", '{"max_pixels": 200704}'],
     '[{"bbox_2d": [126, 91, 378, 364], "label": "bars"}] <points x1="252" y1="182" alt="middle">middle</points>',
     [504, 364], [160, 120, 480, 480], [{"label": "middle", "point": [320, 240]}]),
    ("tiny-qwen3-vl", [], '[{"bbox_2d": [250, 500, 750, 1000], "label": "bars"}]', None, [160, 240, 480, 480], []),
    ("tiny-qwen2-vl", [], "<|object_ref_start|>bars<|object_ref_end|><|box_start|>(250,500),(750,1000)<|box_end|>",
     None, [160, 240, 480, 480], []),
    ("tiny-internvl2.5", [], "<ref>bars</ref><box>[[250, 500, 750, 1000]]</box>", None, [160, 240, 480, 480], []),
]


@pytest.mark.parametrize("model, extra, answer, processed, box, points", DOCUMENTED_EXAMPLES,
                         ids=[e[0] for e in DOCUMENTED_EXAMPLES])
def test_ground_answer_on_the_command_line(model, extra, answer, processed, box, points):
    """``ground --answer --json`` maps each format's documented example to the picture's own pixels (for
    Qwen2.5-VL through the processed size its processor gives at that max_pixels), and docs/grounding.md shows it."""
    import json

    from .conftest import ROOT

    assert answer in (ROOT / "docs" / "grounding.md").read_text()
    out = run_cli("ground", "--model", model, "--image",
                          "assets/bar-chart.png", *extra, "--answer", answer, "--json", timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    data = json.loads(out.stdout)
    assert data["model"] == model and data["image_size"] == [640, 480]
    if processed is not None:
        assert data["processed_size"] == processed
    assert [b["label"] for b in data["boxes"]] == ["bars"]
    assert data["boxes"][0]["box"] == pytest.approx(box)
    assert [p["label"] for p in data["points"]] == [p["label"] for p in points]
    for got, want in zip(data["points"], points, strict=True):
        assert got["point"] == pytest.approx(want["point"])


def test_a_chinese_label_is_drawn_in_a_cjk_font():
    """Labels may be Chinese (InternVL names things in the question's language): drawn in Noto Sans CJK where
    fonts-noto-cjk is installed (the container image and the test system install it), not as empty boxes."""
    from pathlib import Path

    from vlm_demo.grounding import CJK_FONTS, label_font

    font = label_font(24)
    box = bytes(font.getmask("\U0010fffd"))  # a private-use character no font has: the missing-glyph box
    if any(Path(p).is_file() for p in CJK_FONTS):
        assert bytes(font.getmask("猫")) != box and bytes(font.getmask("书生")) != bytes(font.getmask("\U0010fffd" * 2))
    else:  # Pillow's own font: Latin only
        assert bytes(font.getmask("猫")) == box


# Document readers: each cell's category, text and reading order, its box in the format's space; mapped onto the page
# picture (an A4 page at 150 dpi: 1240x1754) with each format's own space.
A4_150 = (1240, 1754)

DOTS_ANSWER = ('[{"bbox": [124, 80, 1108, 160], "category": "Title", "text": "# Quarterly report"}, '
               '{"bbox": [308, 441, 924, 882], "category": "Formula", "text": "$$\\\\frac{a}{b} = [c]$$"}, '
               '{"bbox": [1232, 1764, 616, 882], "category": "Picture"}, '
               '{"bbox": [100, 1700, 400, 1750], "category": "Page-footer", "text": "page {1}')  # cut off
DEEPSEEK_ANSWER = ("<|ref|>title<|/ref|><|det|>[[100, 40, 899, 80]]<|/det|>\n# Quarterly report\n\n"
                   "<|ref|>table<|/ref|><|det|>[[100, 300, 500, 400], [520, 300, 899, 400]]<|/det|>\n"
                   "<table><tr><td>r0c0</td></tr></table>\n\n"
                   "<|ref|>image<|/ref|><|det|>[[0, 0, 999, 999]]<|/det|>\n\n"
                   "<|ref|>text<|/ref|><|det|>[[100, 900, 899, 9")  # cut off inside the det
LIGHTON_ANSWER = ("# Quarterly report\n\nRevenue grew.\n\n![image](image_1.png) 100,250,900,500\n\n"
                  "| a | b |\n|---|---|\n\n![image](image_2.png)0,0,1000,1000\n\n![image](image_3.png) 5,6,7")


@pytest.mark.parametrize("fmt, text, expected", [
    ("DOTS_OCR", DOTS_ANSWER, [
        Found("Title", box=(124, 80, 1108, 160), text="# Quarterly report", order=1),
        Found("Formula", box=(308, 441, 924, 882), text="$$\\frac{a}{b} = [c]$$", order=2),
        Found("Picture", box=(616, 882, 1232, 1764), text="", order=3)]),
    ("DOTS_OCR", '```json\n[{"bbox": [1, 2, 3], "category": "Text", "text": "x"}, {"bbox": "1,2,3,4"}, '
                 '{"category": "Text"}, {"bbox": [1, 2, 3, 4], "category": 7, "text": null}]\n```',
     [Found("", box=(1, 2, 3, 4), text="", order=1)]),
    ("DEEPSEEK_OCR", DEEPSEEK_ANSWER, [
        Found("title", box=(100, 40, 899, 80), text="# Quarterly report", order=1),
        Found("table", box=(100, 300, 500, 400), text="<table><tr><td>r0c0</td></tr></table>", order=2),
        Found("table", box=(520, 300, 899, 400), text="<table><tr><td>r0c0</td></tr></table>", order=2),
        Found("image", box=(0, 0, 999, 999), text="", order=3)]),
    ("DEEPSEEK_OCR", "<|ref|>text<|/ref|><|det|>[[1, 2, 3, 4]]<|/det|>Hello <|r",  # the last cell streams on
     [Found("text", box=(1, 2, 3, 4), text="Hello", order=1)]),
    ("DEEPSEEK_OCR", "<|ref|>text<|/ref|><|det|>[[1, 2, 3], [1, 2, 3, 4, 5]]<|/det|>x", []),
    ("LIGHTONOCR_BBOX", LIGHTON_ANSWER, [
        Found("image", box=(100, 250, 900, 500), text="![image](image_1.png)", order=1),
        Found("image", box=(0, 0, 1000, 1000), text="![image](image_2.png)", order=2)]),
    ("LIGHTONOCR_BBOX", "![image](image_1.png) 1,2,3,4.5 ![x](a.png) 1,2 ![image](b.png)", []),
], ids=["dots-cells-and-cut", "dots-malformed", "deepseek-refs-and-cut", "deepseek-streaming-text",
        "deepseek-malformed", "lighton-images-and-cut", "lighton-malformed"])
def test_reader_formats_parse_cells_in_reading_order(fmt, text, expected):
    from vlm_demo.families import box_formats as grounding

    fmt = getattr(grounding, fmt)
    assert list(fmt.parse(text)) == expected
    for cut in range(len(text)):  # a stream cut anywhere never raises, and its boxes are the whole answer's first
        boxes = [(f.label, f.box, f.order) for f in fmt.parse(text[:cut])]
        if fmt is not grounding.LIGHTONOCR_BBOX:  # (LightOnOCR: a last number may still grow by a digit)
            assert boxes == [(f.label, f.box, f.order) for f in expected][:len(boxes)], text[:cut]


def test_reader_formats_have_no_detect_mode():
    from vlm_demo.families.box_formats import DEEPSEEK_OCR, DOTS_OCR, LIGHTONOCR_BBOX

    assert all(f.detects for f in (QWEN2_5_VL, QWEN3_VL, QWEN2_VL, INTERNVL))
    assert not any(f.detects for f in (DOTS_OCR, DEEPSEEK_OCR, LIGHTONOCR_BBOX))
    assert (DOTS_OCR.space, DEEPSEEK_OCR.space, DEEPSEEK_OCR.scale, LIGHTONOCR_BBOX.space, LIGHTONOCR_BBOX.scale) == (
        "processed", "relative", 999, "relative", 1000)
    assert DEEPSEEK_OCR.bounds(None) == (999, 999) and DOTS_OCR.bounds((1232, 1764)) == (1232, 1764)


def test_detect_refuses_a_reader_and_is_not_offered(registry):
    """A reader's format has boxes but no "where is X" question: Detect mode is not offered for it (its boxes are
    still read from any answer), and a Detect request is one line naming the families that have it."""
    import dataclasses

    from vlm_demo import profile
    from vlm_demo.errors import InputError
    from vlm_demo.families.box_formats import DOTS_OCR
    from vlm_demo.service import grounding_of
    from vlm_demo.ui.contract import has_grounding

    spec = registry.get("tiny-qwen2.5-vl")
    found = profile.resolve(spec)
    assert has_grounding(spec) and grounding_of(found, detect=True) is QWEN2_5_VL
    reader = dataclasses.replace(found, adapter=dataclasses.replace(found.adapter, grounding=DOTS_OCR))
    assert grounding_of(reader) is DOTS_OCR and not has_grounding(reader)
    with pytest.raises(InputError, match=r"reads documents: .*\(Detect mode: .*Qwen2"):
        grounding_of(reader, detect=True)


def _outline_at(page, placed, x: float, y: float) -> bool:
    """Whether the drawn page has a box outline (not white paper) at page pixel (x, y)."""
    return draw(page, placed).getpixel((round(x), round(y))) != (255, 255, 255)


def test_dots_ocr_cells_land_on_the_page_through_the_smart_resize():
    """dots.ocr's boxes are pixels of the page as its processor resized it (Qwen2-VL's smart resize, 28 px per
    token, the checkpoint's 3136..11,289,600 pixels): an A4 page at 150 dpi, 1240x1754, is read at 1232x1764, so a
    box there is scaled by 1240/1232 and 1754/1764 onto the page, not taken as page pixels (dots.ocr #72)."""

    from vlm_demo.families.box_formats import DOTS_OCR
    from vlm_demo.families.qwen_grid import resized

    processed = resized(*A4_150, 3136, 11_289_600)
    assert processed == (1232, 1764)
    title, formula, picture = place(DOTS_OCR.parse(DOTS_ANSWER), DOTS_OCR, A4_150, processed)
    assert formula.box == pytest.approx((310, 438.5, 930, 877))  # 308*1240/1232, 441*1754/1764 ...
    assert picture.box == pytest.approx((620, 877, 1240, 1754))  # the processed image's corner is the page's
    assert title.box == pytest.approx((124 * 1240 / 1232, 80 * 1754 / 1764, 1108 * 1240 / 1232, 160 * 1754 / 1764))
    assert (title.label, title.order, title.text) == ("Title", 1, "# Quarterly report")
    page = Image.new("RGB", A4_150, "white")
    assert _outline_at(page, [formula], 310, 600) and not _outline_at(page, [formula], 308 - 5, 600)
    assert _outline_at(page, [formula], 600, 877) and not _outline_at(page, [formula], 600, 882 + 5)
    # a page whose pixels exceed max_pixels is read smaller: the same box lands on the same page pixels
    small = resized(*A4_150, 3136, 1_003_520)
    assert small == (840, 1176)
    (whole,) = place(DOTS_OCR.parse('[{"bbox": [210, 294, 630, 588], "category": "Table", "text": "<table>"}]'),
                     DOTS_OCR, A4_150, small)
    assert whole.box == pytest.approx((310, 438.5, 930, 877))


def test_deepseek_ocr_refs_land_on_the_page_on_its_999_grid():
    """DeepSeek-OCR's boxes are on a 0-999 grid of the page (its own script draws ``x / 999 * width``): 999 is the
    page's right and bottom edge, not 1000."""

    from vlm_demo.families.box_formats import DEEPSEEK_OCR

    title, left, right, image = place(DEEPSEEK_OCR.parse(DEEPSEEK_ANSWER), DEEPSEEK_OCR, A4_150, None)
    w, h = A4_150
    assert title.box == pytest.approx((100 / 999 * w, 40 / 999 * h, 899 / 999 * w, 80 / 999 * h))
    assert left.box == pytest.approx((124.124, 526.727, 620.621, 702.302), abs=1e-3)
    assert image.box == pytest.approx((0, 0, 1240, 1754))
    assert [(c.label, c.order) for c in (title, left, right, image)] == [
        ("title", 1), ("table", 2), ("table", 2), ("image", 3)]
    page = Image.new("RGB", A4_150, "white")
    assert _outline_at(page, [left], 125, 600) and not _outline_at(page, [left], 118, 600)
    assert _outline_at(page, [left], 400, 702) and not _outline_at(page, [left], 400, 709)


def test_lightonocr_images_land_on_the_page_in_thousandths():

    from vlm_demo.families.box_formats import LIGHTONOCR_BBOX

    first, whole = place(LIGHTONOCR_BBOX.parse(LIGHTON_ANSWER), LIGHTONOCR_BBOX, A4_150, None)
    assert first.box == pytest.approx((124, 438.5, 1116, 877)) and whole.box == pytest.approx((0, 0, 1240, 1754))
    assert (first.label, first.order, first.text) == ("image", 1, "![image](image_1.png)")
    page = Image.new("RGB", A4_150, "white")
    assert _outline_at(page, [first], 124, 600) and not _outline_at(page, [first], 118, 600)


def test_a_readers_cells_as_data_and_drawn_with_their_order():
    from vlm_demo.families.box_formats import DOTS_OCR
    from vlm_demo.grounding import cells

    placed = place(DOTS_OCR.parse(DOTS_ANSWER), DOTS_OCR, A4_150, (1232, 1764))
    assert cells(placed)[1:] == [
        {"order": 2, "category": "Formula", "text": "$$\\frac{a}{b} = [c]$$", "box": [310.0, 438.5, 930.0, 877.0]},
        {"order": 3, "category": "Picture", "text": "", "box": [620.0, 877.0, 1240.0, 1754.0]}]
    assert [p.tag for p in placed] == ["1 Title", "2 Formula", "3 Picture"]
    assert [row[0] for row in rows(placed)] == ["1 Title", "2 Formula", "3 Picture"]  # the page's box table
    assert Placed("cat", box=(1, 2, 3, 4)).tag == "cat"  # a detector's item: its label alone
    assert to_json("m", DOTS_OCR, A4_150, (1232, 1764), placed[1:2])["boxes"] == [
        {"label": "Formula", "box": [310.0, 438.5, 930.0, 877.0], "text": "$$\\frac{a}{b} = [c]$$", "order": 2}]


def test_read_maps_each_pages_cells_onto_its_picture(tmp_path, monkeypatch, capsys):
    """``read``: a reader's saved answers, one per page of a PDF, as cells in each page picture's pixels. Each page
    is rendered on its own by vLLM's renderer (no engine), and a processed-pixel format maps through the size the
    processor gave that page. Tiny Qwen2.5-VL stands for dots.ocr here (the same Qwen2-VL resize, 28 px per token;
    the dots.ocr adapter is wired after merging): an A4 page at 150 dpi under max_pixels 1003520 is read at
    840x1176, the size Qwen's smart resize gives."""
    import vlm_demo.service
    from vlm_demo.cli import build_parser, reading
    from vlm_demo.families.box_formats import DOTS_OCR
    from vlm_demo.families.qwen_grid import resized
    from vlm_demo.settings import Settings

    from .documents import make_pdf

    pdf = make_pdf(tmp_path / "report.pdf", pages=2)
    first, second = tmp_path / "page1.json", tmp_path / "page2.json"
    first.write_text('[{"bbox": [210, 294, 630, 588], "category": "Table", "text": "<table></table>"}, '
                     '{"bbox": [0, 0, 840, 1176], "category": "Picture"}]')
    second.write_text('[{"bbox": [0, 0, 420, 588], "category": "Text", "text": "Line 1"}, '
                      '{"bbox": [0, 0, 900, 10], "category": "Text", "text": "beyond the processed width"}]')
    monkeypatch.setattr(vlm_demo.service, "grounding_of", lambda spec, detect=False: DOTS_OCR)
    monkeypatch.setattr(reading, "_stdout_to_stderr", lambda: sys.stdout)
    args = build_parser().parse_args([
        "read", "--model", "tiny-qwen2.5-vl", "--image", str(pdf), "--dpi", "150", "--mm-kwargs",
        '{"max_pixels": 1003520}', "--answer", str(first), "--answer", str(second), "--json"])
    assert reading.cmd_read(args, Settings.from_env()) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["model"] == "tiny-qwen2.5-vl" and data["format"] == "dots.ocr-json"
    one, two = data["pages"]
    assert [p["page"] for p in (one, two)] == ["page 1 of report.pdf", "page 2 of report.pdf"]
    assert one["image_size"] == [1240, 1755]  # the test PDF's 595 x 842 pt at 150 dpi
    assert one["processed_size"] == list(resized(1240, 1755, 3136, 1003520)) == [840, 1176]
    sx, sy = 1240 / 840, 1755 / 1176
    assert one["cells"] == [
        {"order": 1, "category": "Table", "text": "<table></table>", "box": [310.0, 438.8, 930.0, 877.5]},
        {"order": 2, "category": "Picture", "text": "", "box": [0.0, 0.0, 1240.0, 1755.0]}]
    assert two["cells"] == [{"order": 1, "category": "Text", "text": "Line 1", "box": [0.0, 0.0, 420 * sx, 877.5]}]
    assert one["left_out"] == 0 and two["left_out"] == 1


@pytest.mark.parametrize("model, answers, message", [
    ("tiny-qwen3-vl", ["a", "b"], "1 page but 2 answers: give one --answer file per page, in page order"),
    ("tiny-qwen3-vl", ["/no/such/answer.txt"], "cannot read the answer /no/such/answer.txt: No such file or directory"),
    ("tiny-llava-1.5", ["a"], "tiny-llava-1.5 has no box format the app reads (families with one: "),
], ids=["count", "missing", "no-format"])
def test_read_errors_are_one_line(tmp_path, model, answers, message):


    paths = []
    for name in answers:
        path = tmp_path / name if not name.startswith("/") else name
        if not name.startswith("/"):
            path.write_text("[]")
        paths += ["--answer", str(path)]
    out = run_cli("read", "--model", model, "--image",
                          "assets/bar-chart.png", *paths, timeout=300)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert out.stderr.strip().splitlines() == [out.stderr.strip()] and out.stderr.startswith(f"error: {message}")


def test_read_on_the_command_line(tmp_path):
    """``read`` through the command line: a relative format's cells on the picture, as JSON on stdout."""


    answer = tmp_path / "answer.txt"
    answer.write_text('[{"bbox_2d": [250, 500, 750, 1000], "label": "bars"}]')
    out = run_cli("read", "--model", "tiny-qwen3-vl", "--image",
                          "assets/bar-chart.png", "--answer", str(answer), "--json", timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout) == {"model": "tiny-qwen3-vl", "format": "qwen3-vl-json", "pages": [
        {"page": "image 1", "image_size": [640, 480], "processed_size": [640, 480], "left_out": 0,
         "cells": [{"order": None, "category": "bars", "text": None, "box": [160.0, 240.0, 480.0, 480.0]}]}]}


def test_a_document_read_page_by_page_gets_each_pages_boxes_on_that_page(registry, tmp_path):
    """Page by page, each page's answer is parsed on its own and drawn on that page, in its own pixels with the
    processed size its own request's render reported: a portrait and a landscape page, each with a dots.ocr answer of
    known coordinates, land where their own geometry puts them (not on the last page, not with the first page's
    geometry); a page still streaming shows its complete cells; a page not answered yet has no picture. The chat
    shows each page's part as the document it describes, under the page's heading."""
    from types import SimpleNamespace

    from vlm_demo.intake import DocumentOptions, load_document
    from vlm_demo.service import ChatRequest, Figures, PageAnswer, Turn
    from vlm_demo.settings import Settings
    from vlm_demo.ui.answer import document_view
    from vlm_demo.ui.overlays import PageBoxes

    from .documents import make_pdf

    options = DocumentOptions(dpi=72)
    tall = load_document(make_pdf(tmp_path / "tall.pdf", pages=1), Settings(), options)
    wide = load_document(make_pdf(tmp_path / "wide.pdf", pages=1, size_pt=(842, 595)), Settings(), options)
    pages = (*tall, *wide)
    spec = registry.get("tiny-dots.ocr")
    request = ChatRequest(spec.name, (Turn("user", "Read it.", {"image": pages}),), each_page=True)
    boxes = PageBoxes(DOTS_OCR, pages)
    processed = ((588, 840), (840, 588))  # each page's own render: 28-px cells around 595x842 and 842x595
    answers = ('[{"bbox": [0, 0, 294, 420], "category": "Title", "text": "Tall"}]',
               '[{"bbox": [420, 294, 840, 588], "category": "Table", "text": "<table></table>"}, {"bbox": [1, 2')
    parts = [PageAnswer(p.label, Figures(5, 0.1, 10.0), None, vision=SimpleNamespace(processed_size=size), answer=a)
             for p, size, a in zip(pages, processed, answers, strict=True)]
    figures, table = boxes.update("", parts)
    assert len(figures) == 2 and all(Path(f).is_file() for f in figures)
    assert table == [["page 1: 1 Title", 0.0, 0.0, 297.5, 421.0],  # half of 595x842
                     ["page 1: 1 Table", 421.0, 297.5, 842.0, 595.0]]  # the landscape page's lower right quarter
    # (each document's page 1: the table labels rows by page number)
    assert Image.open(figures[1]).size == (842, 595)
    not_yet = [parts[0], dataclasses.replace(parts[1], vision=None, answer="")]
    figures, table = boxes.update("", not_yet)
    assert len(figures) == 1 and [row[0] for row in table] == ["page 1: 1 Title"]
    shown = document_view(spec, request)("raw", parts)
    assert shown.startswith("**page 1 of tall.pdf**\n\n# Tall") and "**page 1 of wide.pdf**" in shown
    assert "<table></table>" in shown and '"bbox"' not in shown  # each page as its document, not its JSON
    assert document_view(registry.get("tiny-qwen2.5-vl"), request)("raw", parts) == ""  # not a reader: as it is
