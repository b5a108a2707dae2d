"""Grounding: every family's format parsed (cut-off and malformed answers too), mapped to the original
picture with the processor's own geometry, drawn where it belongs."""

from __future__ import annotations

import pytest

from vlm_demo import families
from vlm_demo.families.grounding import INTERNVL, QWEN2_5_VL, QWEN2_VL, QWEN3_VL, Found
from vlm_demo.grounding import COLOURS, Placed, colour_of, draw, place, rows, to_json

from .conftest import make_image


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
                     "internvl_hf": INTERNVL}


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
        request = detect_request(base, spec, "the yellow band")
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


README_EXAMPLES = [  # the README's documented example of each format, on assets/bar-chart.png (640x480)
    ("tiny-qwen2.5-vl", ["--mm-kwargs", '{"max_pixels": 200704}'],
     '[{"bbox_2d": [126, 91, 378, 364], "label": "bars"}] <points x1="252" y1="182" alt="middle">middle</points>',
     [504, 364], [160, 120, 480, 480], [{"label": "middle", "point": [320, 240]}]),
    ("tiny-qwen3-vl", [], '[{"bbox_2d": [250, 500, 750, 1000], "label": "bars"}]', None, [160, 240, 480, 480], []),
    ("tiny-qwen2-vl", [], "<|object_ref_start|>bars<|object_ref_end|><|box_start|>(250,500),(750,1000)<|box_end|>",
     None, [160, 240, 480, 480], []),
    ("tiny-internvl2.5", [], "<ref>bars</ref><box>[[250, 500, 750, 1000]]</box>", None, [160, 240, 480, 480], []),
]


@pytest.mark.parametrize("model, extra, answer, processed, box, points", README_EXAMPLES,
                         ids=[e[0] for e in README_EXAMPLES])
def test_ground_answer_on_the_command_line(model, extra, answer, processed, box, points):
    """``ground --answer --json`` maps each format's documented example to the picture's own pixels (for
    Qwen2.5-VL through the processed size its processor gives at that max_pixels), and the README shows it."""
    import json
    import subprocess
    import sys

    from .conftest import ROOT

    assert answer in (ROOT / "README.md").read_text()
    out = subprocess.run([sys.executable, "-m", "vlm_demo", "ground", "--model", model, "--image",
                          "assets/bar-chart.png", *extra, "--answer", answer, "--json"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
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
