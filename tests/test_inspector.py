"""The inspector on the four tiny models: exact expansion numbers, the InternVL string-format
regression, views, special-token text and inspect-then-chat; the CLI. Counts and ids come from vLLM's renderer
without an engine (what an engine renders: ``test_panel_ids_equal_the_engines_prompt_ids``); answers from the real
engine."""

from __future__ import annotations

import html as html_lib
import json
import re
import subprocess
import sys
import time

import numpy as np
import pytest

from vlm_demo.errors import InputError
from vlm_demo.inspector import draw_overlay, prefill_work, prompt_html, run_length_text, to_json
from vlm_demo.registry import Sampling
from vlm_demo.service import ChatRequest, Delta, Done, Failed, Turn

from .conftest import ROOT, make_image, run_cli
from .oracles import internvl_tiles, ovis_tokens, qwen_tokens

A, B = make_image(640, 480), make_image(1600, 400, seed=1)


def req(model, images=(A,), text="Describe.", **mm_kwargs):
    return ChatRequest(model=model, turns=(Turn("user", text, {"image": tuple(images)} if images else {}),), mm_kwargs=mm_kwargs,
                       sampling=Sampling(temperature=0.0, max_tokens=8, ignore_eos=True))


@pytest.mark.parametrize(("partition", "grid"), [(1, None), (4, (2, 2)), (9, (2, 2))])
async def test_ovis_partitions(service, partition, grid):
    insp = await service.inspect(req("tiny-ovis2", max_partition=partition), start_engine=False)
    (im,) = insp.items["image"]
    n = grid[0] * grid[1] if grid else 1
    assert im.count == ovis_tokens(n)
    assert im.grid == (grid or (1, 1))
    assert im.thumbnail is (n > 1)
    assert insp.content_format == "string"
    assert insp.prompt.count("<image>") == 1


async def test_remote_ovis_geometry_equals_the_engines(service, registry):
    """A remote server gives Ovis2's ids, not its grid; the remote engine's rule (grid from the image size and
    max_partition, shown only when it gives the server's count) must agree with the engine's processor."""
    from vlm_demo.families.ovis import geometry_from_count

    spec = registry.get("tiny-ovis2")
    sizes = [(640, 480), (1600, 400), (300, 900), (1280, 960), (448, 448), (100, 100), (2000, 300), (500, 1400)]
    grids = set()
    for partition in (1, 4, 6, 9):
        kwargs = {**spec.default_mm_kwargs(), "max_partition": partition}
        for i, size in enumerate(sizes):
            image = make_image(*size, seed=i)
            request = req("tiny-ovis2", images=(image,), **kwargs)
            (im,) = (await service.inspect(request, start_engine=False)).items["image"]
            g = geometry_from_count(im.count, image, kwargs)
            assert (g.orig_size, g.processed_size, g.grid, g.thumbnail) == (
                im.orig_size, im.processed_size, im.grid, im.thumbnail), (size, partition)
            assert geometry_from_count(im.count + 1, image, kwargs) is None  # never a guess
            grids.add(im.grid)
    assert len(grids) >= 5, grids  # the sizes do reach different grids


@pytest.mark.parametrize("patches", [1, 6, 12])
@pytest.mark.parametrize("image", [A, B], ids=["640x480", "1600x400"])
async def test_internvl_tiles(service, image, patches):
    request = req("tiny-internvl2.5", images=(image,), max_dynamic_patch=patches)
    insp = await service.inspect(request, start_engine=False)
    (im,) = insp.items["image"]
    tiles = internvl_tiles(*image.size, max_num=patches)
    assert im.count == 256 * tiles
    assert im.thumbnail is (tiles > 1)
    rows, cols = im.grid
    assert rows * cols + (1 if im.thumbnail else 0) == tiles
    assert im.processed_size == (cols * 448, rows * 448)
    assert im.length == im.count + 2  # <img> ... </img>
    assert f"<IMG_CONTEXT>x{im.count}" in run_length_text(insp)
    views = f"{tiles} views of 1 picture" if tiles > 1 else "1 picture"  # what a prefill encodes (its stats line)
    assert prefill_work(insp) == f"{views}, {im.count:,} vision tokens, in a {insp.budget.total:,}-token prompt"


@pytest.mark.parametrize("n_images", [1, 2])
async def test_internvl_string_format_gets_one_placeholder_per_image(service, n_images):
    """The regression: a string-content template must still see one <image> per image."""
    request = req("tiny-internvl2.5", images=(A, B)[:n_images], text="Compare.")
    insp = await service.inspect(request, start_engine=False)
    assert insp.content_format == "string"
    assert insp.prompt.count("<image>") == n_images
    user = [m for m in insp.conversation if m["role"] == "user"][-1]
    assert isinstance(user["content"], str) and user["content"].count("<image>") == n_images
    assert [im.offset for im in insp.items["image"]] == sorted(im.offset for im in insp.items["image"])
    assert run_length_text(insp).count("<img>") == n_images


async def test_internvl_placeholder_text_is_refused(service):
    """"<image>" typed as text would be one more placeholder than images; it is refused."""
    events = [e async for e in service.chat(req("tiny-internvl2.5", text="What is <image>?"), preview=True)]
    assert len(events) == 1 and isinstance(events[0], Failed) and "'<image>'" in events[0].message


@pytest.mark.parametrize("max_pixels", [100352, 401408, 1003520])
async def test_qwen_changes_with_max_pixels(service, max_pixels):
    insp = await service.inspect(req("tiny-qwen2.5-vl", images=(B,), max_pixels=max_pixels), start_engine=False)
    (im,) = insp.items["image"]
    expected = qwen_tokens(1600, 400, 3136, max_pixels)
    assert im.count == expected
    w, h = im.processed_size
    assert w % 28 == 0 and h % 28 == 0 and w * h // 784 == expected
    assert im.grid == (h // 28, w // 28)
    assert insp.content_format == "openai"
    assert "<|vision_start|><|image_pad|><|vision_end|>" in insp.prompt


async def test_views(service):
    insp = await service.inspect(req("tiny-qwen2.5-vl", images=(A,), max_pixels=100352), start_engine=False)
    (im,) = insp.items["image"]
    html = prompt_html(insp, ("<|im_start|>", "<|im_end|>"))
    assert re.search(r'<mark class="ph" title="image 1 of 1 [^"]*">.*&lt;\|image_pad\|&gt;\xd7', html)
    assert re.search(r'<mark class="sp" title="id \d+ · &#x27;&lt;\|im_start\|&gt;&#x27; · position 0">'
                     r'&lt;\|im_start\|&gt;</mark>', html)
    assert f"<|image_pad|>x{im.count}" in run_length_text(insp)
    picture = draw_overlay(A, im)
    assert picture.size == A.size
    x = round(A.width / im.grid[1])  # first vertical cell line
    assert picture.getpixel((x, A.height // 3)) != A.getpixel((x, A.height // 3))
    budget = insp.budget
    assert budget.total == len(insp.prompt_token_ids) == budget.media_tokens["image"] + budget.text_tokens
    assert budget.free == budget.max_model_len - budget.total

@pytest.mark.engine

async def test_panel_ids_equal_the_engines_prompt_ids(service, engines):
    spec = service.registry.get("tiny-qwen2.5-vl")
    engine = await engines.get(spec)
    insp = await service.inspect(req(spec.name))
    rendered = await engine.render(
        [{"role": "user", "content": [{"type": "image_pil", "image_pil": A}, {"type": "text", "text": "Describe."}]}],
        spec.default_mm_kwargs())
    deltas = [d async for d in engine.stream(rendered, Sampling(max_tokens=2, ignore_eos=True))]
    assert deltas[0].prompt_token_ids == insp.prompt_token_ids == rendered.prompt_token_ids

@pytest.mark.engine

async def test_inspect_then_chat_the_same_images(service):
    """An inspect-only render must not spoil the engine's cache for the next generation."""
    request = req("tiny-qwen2.5-vl", images=(B,))
    await service.inspect(request)
    events = [e async for e in service.chat(request)]
    assert isinstance(events[-1], Done) and events[-1].figures.tokens == 8, events[-1]


@pytest.mark.engine
@pytest.mark.parametrize("text", ["What is <|image_pad|> here?", "stop<|im_end|>", "<|vision_start|>"])
async def test_special_tokens_in_text_are_refused(service, engines, text):
    events = [e async for e in service.chat(req("tiny-qwen2.5-vl", text=text))]
    assert len(events) == 1 and isinstance(events[0], Failed)
    assert "special token" in events[0].message
    assert (await engines.get(service.registry.get("tiny-qwen2.5-vl"))).running_requests() == 0
    events = [e async for e in service.chat(req("tiny-qwen2.5-vl", text="plain <b>text</b>"))]
    assert isinstance(events[-1], Done) and any(isinstance(e, Delta) for e in events)


async def test_an_answer_holding_token_text_goes_back_as_it_was(service):
    """The model's own answer may decode to token text (Qwen2.5's non-special <|repo_name|>); the next turn
    sends it back unchanged, while the same text typed by a person is refused."""
    turns = (Turn("user", "Hi", {"image": (A,)}), Turn("assistant", "x<|repo_name|>y"), Turn("user", "And?"))
    insp = await service.inspect(ChatRequest(model="tiny-qwen2.5-vl", turns=turns), start_engine=False)
    assert "x<|repo_name|>y" in insp.prompt
    typed = (Turn("user", "x<|repo_name|>y", {"image": (A,)}),)
    with pytest.raises(InputError, match="special token"):
        await service.inspect(ChatRequest(model="tiny-qwen2.5-vl", turns=typed), start_engine=False)


def save_embeds(path, **tensors):
    from safetensors.numpy import save_file

    save_file(tensors, str(path))
    return path

@pytest.mark.engine

async def test_qwen_accepts_precomputed_embeddings(service, settings, tmp_path):
    from vlm_demo.intake import load_image_embeds

    # A 336x224 image is 24x16 patches of 14 px: 12x8 = 96 tokens after the 2x2 merge.
    path = save_embeds(tmp_path / "q.safetensors", image_embeds=np.ones((96, 128), dtype=np.float32),
                       image_grid_thw=np.array([1, 16, 24], dtype=np.int64))
    insp = await service.inspect(req("tiny-qwen2.5-vl", images=(load_image_embeds(path, settings),)))
    (im,) = insp.items["image"]
    assert im.count == 96 and im.grid == (8, 12) and im.processed_size == (336, 224)
    mixed = req("tiny-qwen2.5-vl", images=(A, load_image_embeds(path, settings)))
    events = [e async for e in service.chat(mixed)]
    assert isinstance(events[-1], Failed) and "Mixing raw image and embedding" in events[-1].message


async def test_llava_576_and_center_crop(service):
    insp = await service.inspect(req("tiny-llava-1.5", images=(A, B)), start_engine=False)
    assert [im.count for im in insp.items["image"]] == [576, 576]
    assert all(im.processed_size == (336, 336) and im.grid is None for im in insp.items["image"])
    data = to_json(insp)
    assert data["images"][0] == {
        "placeholder": "<image>", "token_id": insp.items["image"][0].token_id, "count": 576,
        "offset": insp.items["image"][0].offset, "length": 576, "orig_size": [640, 480],
        "processed_size": [336, 336], "grid": None, "thumbnail": None, "source": None, "page": None, "dpi": None}
    assert data["num_image_tokens"] == 1152
    assert data["num_image_tokens"] + data["num_text_tokens"] == len(data["prompt_token_ids"])
    cropped = draw_overlay(A, insp.items["image"][0], center_crop=True)
    assert cropped.getpixel((10, 240)) != A.getpixel((10, 240))  # outside the crop: dimmed
    assert cropped.getpixel((320, 240)) == A.getpixel((320, 240))  # inside: untouched

@pytest.mark.engine

async def test_llava_accepts_precomputed_embeddings(service, settings, tmp_path):
    from vlm_demo.intake import load_image_embeds

    rng = np.random.default_rng(0)
    embeds = load_image_embeds(save_embeds(tmp_path / "e.safetensors",
                                           image_embeds=rng.standard_normal((576, 128), dtype=np.float32)), settings)
    request = req("tiny-llava-1.5", images=(embeds,))
    insp = await service.inspect(request)
    (im,) = insp.items["image"]
    assert im.count == im.length == 576 and im.orig_size is None
    assert insp.prompt.startswith("USER: <image>\n")
    events = [e async for e in service.chat(request)]
    assert isinstance(events[-1], Done) and events[-1].figures.tokens == 8


def test_cli_inspect_json(tmp_path):
    path = tmp_path / "a.png"
    A.save(path)
    result = run_cli("inspect", "--model", "tiny-llava-1.5", "--image", str(path), "--text", "Hi", "--json")
    assert result.returncode == 0, result.stderr[-2000:]
    data = json.loads(result.stdout)
    assert {"model", "content_format", "prompt", "prompt_token_ids", "max_model_len", "num_image_tokens",
            "num_text_tokens", "images"} <= set(data)
    assert data["images"][0]["count"] == 576 and data["content_format"] == "openai"


@pytest.mark.engine
@pytest.mark.parametrize("text", ["Hi", "What is <image>?"])
def test_cli_chat_exits_without_a_traceback(tmp_path, text):
    """With an engine started and stopped (an answer, or a refusal once the engine is up), stderr holds vLLM's
    log lines but no traceback (vLLM 0.32's AsyncLLM.__del__ failed at interpreter exit)."""
    path = tmp_path / "a.png"
    A.save(path)
    result = run_cli("chat", "--model", "tiny-llava-1.5", "--image", str(path), "--text", text, "--max-tokens", "4",
                     "--json")
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    if text == "Hi":
        assert result.returncode == 0 and 1 <= json.loads(result.stdout)["num_tokens"] <= 4  # EOS may come first
    else:
        assert result.returncode == 1
        assert [line for line in result.stderr.splitlines() if line.startswith("error: ")] == [
            "error: the text contains '<image>', a special token or image placeholder of tiny-llava-1.5; images go in "
            "as attachments and the chat template adds its own markers, so remove it from the text"]


@pytest.mark.parametrize(("args", "message"), [
    (["--model", "nope", "--text", "x"], "unknown model 'nope'"),
    (["--model", "tiny-llava-1.5", "--text", "x", "--mm-kwargs", "{bad"], "--mm-kwargs is not JSON"),
    (["--model", "tiny-llava-1.5", "--text", "x", "--image", "/no/such.png"], "cannot read /no/such.png"),
])
def test_cli_errors_are_one_line(args, message):
    result = run_cli("inspect", *args)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [f"error: {result.stderr.strip().removeprefix('error: ')}"]
    assert message in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["--dpi", "400"], "dpi must be a whole number in 72..300 (got 400)"),
    (["--pages", "1-x"], "--pages: pages '1-x': write pages as 1-3,7"),
    (["--num-frames", "0"], "num_frames must be a whole number in 1..64 (got 0)"),
    (["--mm-kwargs", "[1]"], "--mm-kwargs must be a JSON object"),
    (["--image", "/no/such.pdf"], "cannot read /no/such.pdf"),
])
def test_cli_refuses_bad_arguments_before_loading_vllm(args, message):
    """What the command line alone shows to be wrong is refused in one line within a second: before vLLM and
    transformers load (they took 6-9 s), nothing of theirs imported."""
    t0 = time.perf_counter()
    result = subprocess.run([sys.executable, "-X", "importtime", "-m", "vlm_demo", "inspect", "--model", "tiny-llava-1.5",
                             "--text", "x", *args], cwd=ROOT, capture_output=True, text=True, timeout=60)
    took = time.perf_counter() - t0
    errors = [line for line in result.stderr.splitlines() if not line.startswith("import time:")]
    assert result.returncode == 1 and errors == [errors[0]] and message in errors[0], result.stderr[-2000:]
    imported = {line.split("|")[-1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")}
    assert not imported & {"vllm", "transformers", "torch"}, sorted(imported & {"vllm", "transformers", "torch"})
    assert took < 2.0, f"{took:.2f} s"  # (0.4-0.5 s here on a quiet machine; the imports above are what it holds)


def test_embeddings_files_are_checked(settings, tmp_path):
    import pickle

    from vlm_demo.errors import InputError
    from vlm_demo.intake import load_image_embeds

    (tmp_path / "p.safetensors").write_bytes(pickle.dumps({"image_embeds": [1.0]}))
    with pytest.raises(InputError, match="not a .safetensors file"):
        load_image_embeds(tmp_path / "p.safetensors", settings)
    with pytest.raises(InputError, match="expected tensors 'image_embeds'"):
        load_image_embeds(save_embeds(tmp_path / "x.safetensors", weights=np.ones((2, 2), np.float32)), settings)
    with pytest.raises(InputError, match="2-D float tensor"):
        load_image_embeds(save_embeds(tmp_path / "y.safetensors", image_embeds=np.ones(5, np.float32)), settings)


def _hover(html: str) -> tuple[dict[int, int], list[tuple[str, int, int]], list[str]]:
    """From the prompt view: position -> id of each token element (a character joined over several tokens gives
    each of its positions), (label, first, last) of each tile part, and the titles of the items' marks."""
    tokens, tiles, items = {}, [], []
    for title in (html_lib.unescape(t) for t in re.findall(r'title="([^"]*)"', html)):
        if m := re.fullmatch(r"id (\d+) · '.*' · position (\d+)", title, flags=re.S):
            tokens[int(m[2])] = int(m[1])
        elif m := re.fullmatch(r"ids ([\d, ]+) · '.*' · positions (\d+)-(\d+)", title, flags=re.S):
            joined = [int(i) for i in m[1].split(", ")]  # one character over several byte tokens
            assert len(joined) == int(m[3]) - int(m[2]) + 1
            tokens.update(zip(range(int(m[2]), int(m[3]) + 1), joined))
        elif m := re.fullmatch(r"(.+) · (\d+) tokens · positions (\d+)-(\d+)", title):
            assert int(m[4]) - int(m[3]) + 1 == int(m[2])
            tiles.append((m[1], int(m[3]), int(m[4])))
        else:
            items.append(title)
    return tokens, tiles, items


def _check_positions(insp, tokens, tiles):
    """Every position is shown once, with the engine's id at that position."""
    ids = insp.prompt_token_ids
    covered = sorted([*tokens, *(p for _, first, last in tiles for p in range(first, last + 1))])
    assert covered == list(range(len(ids)))
    assert all(ids[p] == t for p, t in tokens.items())
    feature = {e.token_id for e in insp.expansions()}
    assert all(ids[p] in feature for _, first, last in tiles for p in range(first, last + 1))


async def test_prompt_hover_internvl_two_images(service):
    insp = await service.inspect(req("tiny-internvl2.5", images=(A, B), text="Compare."), start_engine=False)
    html = prompt_html(insp, ("<|im_start|>", "<|im_end|>", "<img>", "</img>"))
    tokens, tiles, items = _hover(html)
    _check_positions(insp, tokens, tiles)
    assert tokens[0] == insp.prompt_token_ids[0] and "'<|im_start|>'" in html_lib.unescape(html)
    images = insp.items["image"]
    assert len(images) == 2
    for e in images:
        assert f"image {e.index + 1} of 2 · {e.count} × '<IMG_CONTEXT>' (id {e.token_id}) · positions {e.offset}-" \
               f"{e.offset + e.length - 1}" in items
        rows, cols = e.grid
        n = rows * cols + (1 if e.thumbnail else 0)
        mine = [t for t in tiles if e.offset <= t[1] < e.offset + e.length]
        assert [label.split(" (")[0] for label, _, _ in mine] == [f"tile {k} of {n}" for k in range(1, n + 1)]
        assert all(last - first + 1 == 256 for _, first, last in mine)  # InternVL2.5: 256 tokens a tile
        assert sum(last - first + 1 for _, first, last in mine) == e.count
        if e.thumbnail:
            assert mine[-1][0].endswith("(thumbnail)")
    assert images[1].grid != (1, 1) and len([t for t in tiles if t[1] >= images[1].offset]) > 1
    assert html.count('<mark class="ph"') == 2 and "style=" not in html


async def test_prompt_hover_qwen_rows(service):
    insp = await service.inspect(req("tiny-qwen2.5-vl", images=(B,), max_pixels=200704), start_engine=False)
    html = prompt_html(insp, ("<|im_start|>", "<|im_end|>"))
    tokens, tiles, items = _hover(html)
    _check_positions(insp, tokens, tiles)
    (e,) = insp.items["image"]
    rows, cols = e.grid
    assert [label for label, _, _ in tiles] == [f"row {r} of {rows}" for r in range(1, rows + 1)]
    assert all(last - first + 1 == cols for _, first, last in tiles) and rows * cols == e.count
    assert any(i.startswith(f"image 1 of 1 · {e.count} × '<|image_pad|>'") for i in items)


def test_what_a_page_cost_with_made_up_numbers():
    """Vision tokens in, text tokens out and their ratio, per page and per document. Page 1 stands for a Pixtral-like
    range (1000 features, 45 break/end tokens of their own ids); page 2 for DeepSeek-OCR's A4 Gundam count (903
    positions, one id, of which the family's rule says 46 are row newlines and 1 the view separator): only the
    features count, and the words say which tokens were left out."""
    from vlm_demo.inspector import DocumentCost, Expansion, cost_json, page_cost

    def page(count: int, length: int, number: int) -> Expansion:
        return Expansion("image", number - 1, "<image>", 7, count, 10 + 1000 * number, length, (1240, 1754),
                         None, None, None, source="report.pdf", page=number, dpi=150)

    first = page_cost(page(1000, 1045, 1), text_out=2500)
    second = page_cost(page(903, 903, 2), text_out=1712, breaks={"row newlines": 46, "view separator": 1,
                                                                 "tile ends": 0})
    assert (first.label, first.vision_in, first.others, first.ratio) == ("page 1 of report.pdf", 1000, 45, 2.5)
    assert (second.vision_in, second.others, second.ratio) == (856, 47, 2.0)
    assert "not counted: 45 tokens of other ids" in first.counted and "1000 of the 1045 positions" in first.counted
    assert "not counted: 46 row newlines, 1 view separator, placed under the same id" in second.counted
    assert "tile ends" not in second.counted and "other ids" not in second.counted
    document = DocumentCost((first, second))
    assert (document.vision_in, document.range_tokens, document.text_out) == (1856, 1948, 4212)
    assert document.ratio == pytest.approx(4212 / 1856)
    data = cost_json(document)
    assert data["total"] == {"vision_tokens_in": 1856, "placeholder_tokens": 1948, "text_tokens_out": 4212,
                             "ratio": pytest.approx(2.2694, abs=1e-4)}
    assert data["pages"][1]["breaks"] == {"row newlines": 46, "view separator": 1}
    assert page_cost(page(0, 0, 3), text_out=5, label="blank").ratio is None and DocumentCost(()).ratio is None
    with pytest.raises(ValueError):
        page_cost(page(10, 10, 4), text_out=1, breaks={"row newlines": 11})
