"""The Qwen2.5-Omni thinker through vLLM's renderer (no engine), on its tiny model (``vlm_demo/tiny_models/
qwen2_5_omni.py``): a clip and a picture in one message cost what the checkpoint says (75 + 391), as transformers' own
Omni processor expands them; vLLM cuts no clip (transformers alone stops at 300 s); a video's own sound
(``use_audio_in_video``) interleaves with its frames per 2 s inside the video's markers."""

from __future__ import annotations

import asyncio
import dataclasses
import io

import av
import numpy as np
import pytest

from vlm_demo.engine import EngineManager
from vlm_demo.engine.renderer import chat_params
from vlm_demo.intake import load_video
from vlm_demo.service import ChatRequest, Turn, to_openai_messages

from vlm_demo.families import qwen2_5_omni as family

from .conftest import make_clip, make_image

MODEL = "tiny-qwen2.5-omni"


@pytest.fixture(scope="module")
def omni(registry, settings):
    """The tiny model's renderer; vLLM's processor cache off (a video's sound cached from an earlier render leaves the
    video alone in a later one: vLLM 0.32 then says "Video doesn't have audio track")."""
    spec = registry.get(MODEL)
    spec = dataclasses.replace(spec, engine_args=dataclasses.replace(spec.engine_args, mm_processor_cache_gb=0))
    return EngineManager(settings).start_renderer(spec)


def rendered(renderer, media, settings_mm=None):
    request = ChatRequest(model=renderer.spec.name, turns=(Turn("user", "What do you hear and see?", media),))
    return asyncio.run(renderer.render(to_openai_messages(request), settings_mm or {}))


def counts(out, modality) -> list[int]:
    token = out.token_ids[modality]
    ids = out.prompt_token_ids
    return [sum(1 for t in ids[r.offset:r.offset + r.length] if t == token) for r in out.ranges[modality]]


def test_a_clip_and_a_picture_in_one_message(omni, settings):
    assert omni.modalities == ("image", "video", "audio") and omni.audio_rate == 16_000
    clip, picture = make_clip(3.0, settings=settings), make_image(640, 480)
    out = rendered(omni, {"audio": (clip,), "image": (picture,)})
    assert counts(out, "audio") == [family.tokens_for(3.0)] == [75]
    assert counts(out, "image") == [391]
    assert out.content_format == "openai"
    assert "<|audio_bos|><|AUDIO|><|audio_eos|>" in out.prompt and "<|vision_bos|><|IMAGE|><|vision_eos|>" in out.prompt
    (heard,) = out.geometry["audio"]
    assert heard.feature_frames == 300 and heard.heard_s == 3.0
    assert out.geometry["image"][0].grid == (17, 23)
    # transformers' own Omni processor, given the clip at 16 kHz and the picture, expands them to as many tokens
    from transformers import AutoProcessor

    hf = AutoProcessor.from_pretrained(omni.model_config.model)
    ids = hf(text="<|audio_bos|><|AUDIO|><|audio_eos|><|vision_bos|><|IMAGE|><|vision_eos|>", audio=[clip.at(16_000)],
             images=[picture], return_tensors="np")["input_ids"][0]
    assert [int((ids == out.token_ids[m]).sum()) for m in ("audio", "image")] == [75, 391]


def test_vllm_cuts_no_clip_where_transformers_stops_at_300_s(omni, settings):
    """310 s: vLLM's processor calls transformers' with ``truncation=False``, so all of it is heard (7750 tokens);
    transformers alone truncates to its extractor's 300-s window (7500)."""
    longer = dataclasses.replace(settings, max_audio_seconds=400.0, max_audio_bytes=10**9)
    clip = make_clip(310.0, rate=16_000, settings=longer)
    out = rendered(omni, {"audio": (clip,)})
    assert counts(out, "audio") == [family.tokens_for(310.0)] == [7750]
    assert out.geometry["audio"][0].heard_s == 310.0
    from transformers import AutoProcessor

    hf = AutoProcessor.from_pretrained(omni.model_config.model)
    ids = hf(text="<|AUDIO|>", audio=[clip.at(16_000)], return_tensors="np")["input_ids"][0]
    assert int((ids == out.token_ids["audio"]).sum()) == family.tokens_for(family.CAP_S) == 7500


def talking_video(seconds: float = 4.0, fps: int = 4, rate: int = 16_000, size: int = 64) -> bytes:
    """An mp4 with frames that brighten and a 440-Hz tone as its sound (AAC, mono, at ``rate``)."""
    out = io.BytesIO()
    with av.open(out, mode="w", format="mp4") as box:
        picture = box.add_stream("mpeg4", rate=fps)
        picture.width = picture.height = size
        picture.pix_fmt = "yuv420p"
        sound = box.add_stream("aac", rate=rate, layout="mono")
        t = np.arange(int(seconds * rate)) / rate
        wave = (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)[None, :]
        for i in range(int(seconds * fps)):
            frame = av.VideoFrame.from_ndarray(np.full((size, size, 3), i * 15, np.uint8), format="rgb24")
            box.mux(picture.encode(frame))
        box.mux(picture.encode(None))
        step = sound.codec_context.frame_size or 1024
        for start in range(0, wave.shape[1], step):
            frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(wave[:, start:start + step]), format="fltp",
                                               layout="mono")
            frame.sample_rate = rate
            box.mux(sound.encode(frame))
        box.mux(sound.encode(None))
    return out.getvalue()


def runs(ids, names) -> list[tuple[str, int]]:
    """The marker and feature tokens of ``ids`` as (name, run length), text left out."""
    found: list[list] = []
    for t in ids:
        name = names.get(t)
        if found and found[-1][0] == name:
            found[-1][1] += 1
        else:
            found.append([name, 1])
    return [(n, c) for n, c in found if n is not None]


def test_a_videos_own_sound_interleaves_per_two_seconds(omni, settings, tmp_path):
    """``use_audio_in_video``: vLLM's chat parser takes the sound from the video's own URL (one audio item per video)
    and expands the video's placeholder to ``<|audio_bos|>``, per 2 s (two temporal patches at the processor's assumed
    2 fps) that chunk's frame tokens then at most 50 of the sound's, the rest, ``<|audio_eos|>``: one range for both
    modalities, each embedding its own tokens. (vLLM's renderer is called directly: the app's ``Renderer.render``
    pairs each item with a part of the message and finds no clip part for the video's sound.)"""
    path = tmp_path / "talking.mp4"
    path.write_bytes(talking_video())
    video = load_video(path, settings)
    request = ChatRequest(model=MODEL, turns=(Turn("user", "What happens?", {"video": (video,)}),))
    kwargs = {"use_audio_in_video": True}
    server_tok = dataclasses.replace(omni._renderer.default_chat_tok_params, add_special_tokens=False)
    _, (engine_input,) = asyncio.run(omni._renderer.render_chat_async(
        [to_openai_messages(request)], chat_params(kwargs), server_tok, prompt_extras={"mm_processor_kwargs": kwargs},
        skip_mm_cache=True))
    tokenizer = omni.tokenizer
    names = {tokenizer.convert_tokens_to_ids(t): t for t in ("<|AUDIO|>", "<|VIDEO|>", "<|audio_bos|>", "<|audio_eos|>",
                                                             "<|vision_bos|>", "<|vision_eos|>")}
    (video_range,), (audio_range,) = engine_input["mm_placeholders"]["video"], engine_input["mm_placeholders"]["audio"]
    assert (video_range.offset, video_range.length) == (audio_range.offset, audio_range.length)  # one shared range
    found = runs(engine_input["prompt_token_ids"], names)
    grid_t, grid_h, grid_w = engine_input["mm_kwargs"]["video"][0]["video_grid_thw"].data.tolist()
    per_group = grid_h * grid_w // 4
    assert grid_t == 4  # 4 s at vLLM's default 2 frames a second: 8 frames, 4 temporal patches
    heard = audio_range.get_num_embeds()
    assert heard >= 100  # the 4-s tone (an AAC encoder adds a few priming samples)
    assert found == [("<|vision_bos|>", 1), ("<|audio_bos|>", 1), ("<|VIDEO|>", 2 * per_group), ("<|AUDIO|>", 50),
                     ("<|VIDEO|>", 2 * per_group), ("<|AUDIO|>", heard - 50), ("<|audio_eos|>", 1),
                     ("<|vision_eos|>", 1)]
    assert video_range.get_num_embeds() == grid_t * per_group


def test_the_apps_renderer_takes_a_videos_own_sound(omni, settings, tmp_path):
    """vLLM's audio item with no clip part of its own (the video's sound at 48 kHz, a camera's: vLLM resamples it,
    with soxr here: ``workarounds._resample_with_soxr``; torchaudio is not installed): described from the
    processor's output."""
    path = tmp_path / "talking.mp4"
    path.write_bytes(talking_video(rate=48_000))
    video = load_video(path, settings)
    out = rendered(omni, {"video": (video,)}, {"use_audio_in_video": True})
    (sound,) = out.geometry["audio"]
    assert sound.heard_s and sound.feature_frames and "audio" not in out.frames


def test_the_tokenizer_carries_the_checkpoints_added_tokens_in_order(omni):
    """The 22 added tokens of the checkpoint (151643-151664 there) at the same distances, the first 14 special, and
    the thinker config's token fields pointing at the same tokens as the checkpoint's (151646, 151655, 151656, ...)."""
    from vlm_demo.tiny_models.common import QWEN2_5_ADDED_TOKENS
    from vlm_demo.tiny_models.qwen2_5_omni import SPECIAL_TOKENS

    added = {t.content: (i, t.special) for i, t in omni.tokenizer.added_tokens_decoder.items()}
    expected = [*SPECIAL_TOKENS, *QWEN2_5_ADDED_TOKENS]
    ids = [added[t][0] for t in expected]
    assert ids == list(range(ids[0], ids[0] + 22)) and [added[t][1] for t in expected] == [True] * 14 + [False] * 8
    real = dict(zip(expected, range(151643, 151665)))
    thinker = omni.model_config.hf_config.thinker_config
    fields = {"audio_token_index": "<|AUDIO|>", "image_token_index": "<|IMAGE|>", "video_token_index": "<|VIDEO|>",
              "audio_start_token_id": "<|audio_bos|>", "audio_end_token_id": "<|audio_eos|>"}
    assert {f: real[t] for f, t in fields.items()} == {"audio_token_index": 151646, "image_token_index": 151655,
                                                       "video_token_index": 151656, "audio_start_token_id": 151647,
                                                       "audio_end_token_id": 151648}  # the checkpoint's config
    assert all(getattr(thinker, f) == added[t][0] for f, t in fields.items())


def test_a_videos_own_sound_is_counted_once_in_the_budget(registry, engines, settings, tmp_path):
    """The frames and the sound share one range (one pair of markers): the budget gives each feature token to its
    own modality, so the media and the text add up to the prompt (it counted the range twice: text went negative)."""
    from vlm_demo.service import ChatService

    path = tmp_path / "talking.mp4"
    path.write_bytes(talking_video(rate=48_000))
    service = ChatService(registry, engines, settings)
    request = ChatRequest(model="tiny-qwen2.5-omni", turns=(Turn("user", "What?", {"video": (load_video(path, settings),)}),),
                          mm_kwargs={"use_audio_in_video": True})
    inspection = asyncio.run(service.inspect(request, start_engine=False))
    (video,), (sound,) = inspection.items["video"], inspection.items["audio"]
    assert (video.offset, video.length) == (sound.offset, sound.length)
    b = inspection.budget
    assert b.media_tokens["audio"] == sound.count and b.media_tokens["video"] + sound.count == video.length
    assert sum(b.media_tokens.values()) + b.text_tokens == b.total and b.text_tokens > 0
    # read again at another frame rate: the entry's engine has no processor cache (vLLM 0.32 then refused the sound:
    # "Video doesn't have audio track with `audio_in_video=True`")
    again = asyncio.run(service.inspect(dataclasses.replace(request, media_io={"video": {"fps": 4}}),
                                        start_engine=False))
    assert again.items["audio"][0].count == sound.count and again.items["video"][0].count == 2 * video.count
