"""Video through the whole app: vLLM's own loader samples the frames (``media_io_kwargs``), the ids are the
renderer's, the inspector's groups and frames add up to them, and each family with video streams an answer."""

from __future__ import annotations

import dataclasses
import json

import pytest

from vlm_demo.engine.renderer import chat_params
from vlm_demo.export import chat_completions_body
from vlm_demo.inspector import contact_sheet, to_json
from vlm_demo.intake import load_video
from vlm_demo.profile import resolve
from vlm_demo.registry import Sampling
from vlm_demo.service import ChatRequest, ChatService, Done, Failed, Rendered, Turn, sent_media_io, to_openai_messages
from vlm_demo.settings import VIDEO_FPS, VIDEO_NUM_FRAMES

from .cases import CLIP, video_request
from .conftest import make_image, run_cli

FIXED = Sampling(temperature=0.0, top_p=1.0, max_tokens=8, ignore_eos=True)

VIDEO_FAMILIES = ("tiny-qwen2.5-vl", "tiny-qwen2-vl", "tiny-qwen3-vl", "tiny-internvl2.5", "tiny-internvl3.5-hf",
                  "tiny-llava-onevision")
"""Every tiny model of a family with video in vLLM that the app has an adapter for."""
STREAMED = ("tiny-qwen2.5-vl", "tiny-qwen3-vl", "tiny-internvl2.5", "tiny-internvl3.5-hf", "tiny-llava-onevision")


@pytest.fixture(scope="module")
def clip(settings):
    return load_video(CLIP, settings)


@pytest.mark.parametrize("model", VIDEO_FAMILIES)
async def test_video_ids_are_the_renderers_and_the_groups_add_up(model, clip, renderer, registry, engines, settings):
    """For 8 and 4 sampled frames: the ids equal vLLM's one-call renderer for the same request; the frames are
    the ones vLLM's loader sampled; the groups the panel shows add up to the ids' count, and fewer frames give
    fewer tokens."""
    service = ChatService(registry, engines, settings)
    counts = {}
    for frames in (8, 4):
        request = video_request(model, clip, frames)
        inspection = await service.inspect(request, start_engine=False)
        r = renderer(model)
        server_tok = dataclasses.replace(r._renderer.default_chat_tok_params, add_special_tokens=False)
        mm_kwargs = {**registry.get(model).default_mm_kwargs()}
        media_io = sent_media_io(request, resolve(registry.get(model)), settings)
        _, (reference,) = await r._renderer.render_chat_async(
            [to_openai_messages(request)], chat_params(mm_kwargs, media_io),
            server_tok, prompt_extras={"mm_processor_kwargs": mm_kwargs} if mm_kwargs else None, skip_mm_cache=True)
        assert list(inspection.prompt_token_ids) == list(reference["prompt_token_ids"]), model
        (video,) = inspection.items["video"]
        assert video.num_frames == frames and len(video.timestamps_s) == frames
        assert list(video.timestamps_s) == sorted(video.timestamps_s) and video.timestamps_s[-1] < clip.duration_s
        assert sum(video.groups) == video.count > 0
        assert video.frames_per_group and video.frames_per_group * len(video.groups) == frames
        assert len(inspection.frames["video"][0]) == frames  # the contact sheet's pictures: vLLM's own frames
        out = to_json(inspection)
        assert out["num_video_tokens"] == video.length and out["num_image_tokens"] == 0
        assert out["videos"][0]["num_frames"] == frames and out["videos"][0]["count"] == video.count
        assert set(out["videos"][0]) >= {"placeholder", "token_id", "count", "offset", "length", "num_frames",
                                         "timestamps_s", "grid"}
        json.dumps(out)
        sheet = contact_sheet(video, inspection.frames["video"][0])
        assert sheet.width > 400 and sheet.height > 100
        counts[frames] = video.count
    assert counts[4] < counts[8], counts


@pytest.mark.parametrize("model, groups, per_group", [
    ("tiny-qwen2.5-vl", [140] * 4, 2),       # 320x240 -> 392x280 (min_pixels), 10x14 cells, 2 frames a patch
    ("tiny-internvl2.5", [256] * 8, 1),      # one 448-px tile per frame, 16x16 after pixel shuffle
    ("tiny-internvl3.5-hf", [256] * 8, 1),
    ("tiny-llava-onevision", [196] * 7 + [197], 1),  # 27x27 pooled 2x2 = 14x14; the newline token last
])
async def test_groups_for_the_project_clip(model, groups, per_group, clip, registry, engines, settings):
    service = ChatService(registry, engines, settings)
    inspection = await service.inspect(video_request(model, clip, 8), start_engine=False)
    (video,) = inspection.items["video"]
    assert list(video.groups) == groups and video.frames_per_group == per_group


@pytest.mark.engine
@pytest.mark.parametrize("model", STREAMED)
async def test_video_answers_stream(model, clip, service):
    """Each family with video answers about the clip on the real engine: at least 8 streamed tokens, from the
    very prompt the panels showed."""
    events = [e async for e in service.chat(video_request(model, clip, 4, sampling=FIXED))]
    assert not any(isinstance(e, Failed) for e in events), events
    rendered = next(e for e in events if isinstance(e, Rendered))
    done = events[-1]
    assert isinstance(done, Done) and done.figures.tokens >= 8 and done.answer
    assert done.figures.prompt_tokens == len(rendered.rendered.prompt_token_ids)
    assert rendered.inspection.items["video"][0].num_frames == 4


async def test_video_and_images_together_and_in_later_turns(clip, registry, engines, settings):
    """A video and an image in one message, then a second turn: every turn keeps both, in order."""
    service = ChatService(registry, engines, settings)
    first = Turn("user", "Compare them.", {"image": (make_image(320, 240),), "video": (clip,)})
    request = ChatRequest(model="tiny-qwen2.5-vl", turns=(first, Turn("assistant", "They differ."),
                                                          Turn("user", "How?")),
                          media_io={"video": {"fps": 1.0}})
    inspection = await service.inspect(request, start_engine=False)
    assert len(inspection.items["image"]) == 1 and len(inspection.items["video"]) == 1
    assert inspection.items["video"][0].num_frames == 4
    assert set(inspection.budget.media_tokens) == {"image", "video"}


def test_media_io_is_sent_as_vllm_serve_takes_it(clip, registry, settings):
    """Export: the video travels as a ``video_url`` data URL and the sampling as ``media_io_kwargs``, in the
    option the family's loader follows; without options the app still says it (never vLLM's silent default)."""
    spec = registry.get("tiny-internvl2.5")
    body = chat_completions_body(video_request(spec.name, clip, 8), spec)
    part = body["messages"][-1]["content"][0]
    assert part["type"] == "video_url" and part["video_url"]["url"].startswith("data:video/webm;base64,")
    assert body["media_io_kwargs"] == {"video": {"num_frames": 8}}
    assert chat_completions_body(video_request(spec.name, clip), spec)["media_io_kwargs"] == {
        "video": {"num_frames": VIDEO_NUM_FRAMES}}
    fps_only = dataclasses.replace(video_request(spec.name, clip), media_io={"video": {"fps": 2.0}})
    assert chat_completions_body(fps_only, spec)["media_io_kwargs"] == {
        "video": {"fps": 2.0, "num_frames": settings.max_video_frames}}
    qwen = registry.get("tiny-qwen2.5-vl")  # sampled by rate: num_frames would be ignored, so it is not sent
    frames_only = dataclasses.replace(video_request(qwen.name, clip), media_io={"video": {"num_frames": 8}})
    assert chat_completions_body(frames_only, qwen)["media_io_kwargs"] == {"video": {"fps": VIDEO_FPS}}
    text_only = ChatRequest(model=spec.name, turns=(Turn("user", "hi"),), media_io={"video": {"num_frames": 8}})
    assert "media_io_kwargs" not in chat_completions_body(text_only, spec)


async def test_a_long_clip_at_a_high_rate_is_refused(registry, engines, settings, tmp_path):
    """A family sampled by rate: a clip whose length times the rate passes ``max_video_frames`` is refused in
    one line before any engine starts (a family sampled by count is held by the num_frames range)."""
    import cv2
    import numpy as np

    from vlm_demo.engine import EngineManager

    path = tmp_path / "long.mp4"
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 4, (32, 32))
    for _ in range(4 * 40):  # 40 s at 4 fps
        writer.write(np.zeros((32, 32, 3), np.uint8))
    writer.release()
    long_clip = load_video(path, settings)
    manager = EngineManager(settings)
    service = ChatService(registry, manager, settings)
    request = ChatRequest(model="tiny-qwen2.5-vl", turns=(Turn("user", "?", {"video": (long_clip,)}),),
                          media_io={"video": {"fps": 4.0}})
    events = [e async for e in service.chat(request)]
    assert isinstance(events[0], Failed) and "at 4 fps its 40.0 s give 160 frames; the limit is 64" in events[0].message
    assert manager.starts == 0


@pytest.mark.parametrize("model, media_io, message", [
    ("tiny-llava-1.5", {}, "tiny-llava-1.5 does not take video (it takes: image)"),
    ("tiny-qwen2.5-vl", {"video": {"num_frames": 0}}, "num_frames must be a whole number in 1..64"),
    ("tiny-qwen2.5-vl", {"video": {"num_frames": 65}}, "num_frames must be a whole number in 1..64"),
    ("tiny-qwen2.5-vl", {"video": {"num_frames": "8"}}, "num_frames must be a whole number in 1..64"),
    ("tiny-qwen2.5-vl", {"video": {"fps": -1}}, "fps must be a number above 0 and at most 8"),
    ("tiny-qwen2.5-vl", {"video": {"backend": "torchcodec"}}, "unknown video option 'backend'"),
], ids=["no-video-model", "zero-frames", "too-many-frames", "string-frames", "negative-fps", "unknown-option"])
async def test_bad_video_requests_are_refused_before_any_engine(model, media_io, message, clip, registry, settings):
    from vlm_demo.engine import EngineManager

    engines = EngineManager(settings)
    service = ChatService(registry, engines, settings)
    request = dataclasses.replace(video_request(model, clip), media_io=media_io)
    events = [e async for e in service.chat(request)]
    assert len(events) == 1 and isinstance(events[0], Failed) and message in events[0].message, events
    assert engines.starts == 0


async def test_two_videos_in_one_message_are_refused(clip, registry, engines, settings):
    service = ChatService(registry, engines, settings)
    request = ChatRequest(model="tiny-qwen2.5-vl", turns=(Turn("user", "?", {"video": (clip, clip)}),))
    events = [e async for e in service.chat(request)]
    assert isinstance(events[0], Failed) and "2 videos in one message; tiny-qwen2.5-vl takes at most 1" in events[0].message


async def test_qwen_frames_have_their_own_pixel_bounds(clip, registry, engines, settings):
    """``videos_kwargs.max_pixels`` (a control scoped to video) resizes each frame and leaves the image alone: the
    image keeps its own ``max_pixels`` (a 1280x720 picture, which that bound resizes). It reaches vLLM as
    ``{"videos_kwargs": {"size": ...}}`` with the unscoped ``max_pixels`` as ``images_kwargs`` (given both
    ways, transformers 5.19 applied neither to the image: 1196 tokens instead of 480, under the hash of 480), in
    the render and in Export."""
    service = ChatService(registry, engines, settings)
    model = "tiny-qwen2.5-vl"
    turns = (Turn("user", "Compare.", {"image": (make_image(1280, 720),), "video": (clip,)}),)
    counts = []
    for kwargs in ({}, {"videos_kwargs.max_pixels": 12544}):
        request = ChatRequest(model=model, turns=turns, mm_kwargs=kwargs)
        inspection = await service.inspect(request, start_engine=False)
        counts.append((inspection.items["image"][0].count, inspection.items["video"][0].count))
    (image_a, video_a), (image_b, video_b) = counts
    assert image_a == image_b == 480 and video_b < video_a, counts  # 30 x 16 cells of 28 px at max_pixels 401408
    assert inspection.items["video"][0].processed_size[0] * inspection.items["video"][0].processed_size[1] <= 12544
    body = chat_completions_body(request, registry.get(model))
    # as the processors' size (transformers 5.19 deprecates the pixel kwargs), each with its own other edge
    assert body["mm_processor_kwargs"] == {"images_kwargs": {"size": {"shortest_edge": 3136, "longest_edge": 401408}},
                                           "videos_kwargs": {"size": {"shortest_edge": 100352, "longest_edge": 12544}}}


def test_cli_inspects_a_video():
    """``inspect --video --num-frames --json`` prints the ``videos`` list; a video to a model without video is
    one line on stderr, exit 1, no traceback."""
    out = run_cli("inspect", "--model", "tiny-internvl2.5", "--video",
                          str(CLIP), "--num-frames", "4", "--text", "Where does the square go?", "--json", timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    data = json.loads(out.stdout)
    (video,) = data["videos"]
    assert video["num_frames"] == 4 and len(video["timestamps_s"]) == 4 and video["count"] == 4 * 256
    assert data["num_video_tokens"] == video["length"] and data["images"] == []
    refused = run_cli("inspect", "--model", "tiny-llava-1.5", "--video",
                              str(CLIP), "--text", "?", timeout=300)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert refused.stderr.strip().splitlines()[-1].endswith("tiny-llava-1.5 does not take video (it takes: image); "
                                                            "pick a model that does")


async def test_a_family_without_an_adapter_shows_video_counts_and_ranges(clip, registry, engines, settings):
    """The generic path (no adapter: the tiny Qwen2.5-VL directory under ``family: generic``): the video's
    feature token, count, range and sampled frames come from vLLM; its groups are the ids' runs."""
    from vlm_demo.tiny_models import tiny_model_dir

    tiny = registry.get("tiny-qwen2.5-vl")
    directory = tiny_model_dir("qwen2_5_vl", settings.cache_dir / "tiny-models")
    spec = dataclasses.replace(tiny, name="generic-video", tiny=False, path=str(directory), family="generic",
                               controls=())
    service = ChatService(registry.with_model(spec), engines, settings)
    request = ChatRequest(model=spec.name, turns=(Turn("user", "Where?", {"video": (clip,)}),),
                          media_io={"video": {"num_frames": 6}})
    inspection = await service.inspect(request, start_engine=False)
    (video,) = inspection.items["video"]
    assert inspection.family == "generic" and video.placeholder == "<|vision_start|><|video_pad|><|vision_end|>"
    assert video.count == video.length > 0 and video.groups == (video.count,)  # one run of <|video_pad|>
    assert video.num_frames == 8  # vLLM's Qwen loader samples by rate (2 fps x 4 s), whatever num_frames says
