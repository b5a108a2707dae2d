"""Gemma 4 E2B through vLLM's renderer (no engine), on its tiny model (``vlm_demo/tiny_models/gemma4.py``): a clip and a
picture in one message cost what the checkpoint's rules say (75 + 266), as transformers' own Gemma 4 processor expands
them; a 45-s clip is capped at 750 tokens (30 s heard), which vLLM only logs; the remote rules agree; the tiny
tokenizer carries the checkpoint's named tokens in the real ids' order."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from vlm_demo.engine import EngineManager
from vlm_demo.service import ChatRequest, Turn, to_openai_messages

from vlm_demo.families import gemma4 as family

from .conftest import make_clip, make_image

MODEL = "tiny-gemma-4-e2b"


@pytest.fixture(scope="module")
def gemma4(registry, settings):
    """The tiny model's renderer (built once for this module)."""
    return EngineManager(settings).start_renderer(registry.get(MODEL))


def rendered(renderer, media):
    request = ChatRequest(model=renderer.spec.name, turns=(Turn("user", "What do you hear and see?", media),))
    return asyncio.run(renderer.render(to_openai_messages(request), {}))


def counts(out, modality) -> list[int]:
    token = out.token_ids[modality]
    ids = out.prompt_token_ids
    return [sum(1 for t in ids[r.offset:r.offset + r.length] if t == token) for r in out.ranges[modality]]


def hf_counts(renderer, text, **media) -> np.ndarray:
    """transformers' own Gemma 4 processor (the tiny model's saved one) on ``text`` and the media: its ids."""
    from transformers import AutoProcessor

    hf = AutoProcessor.from_pretrained(renderer.model_config.model)
    return hf(text=text, return_tensors="np", **media)["input_ids"][0]


def test_a_clip_and_a_picture_in_one_message(gemma4, settings):
    assert set(gemma4.modalities) >= {"image", "audio"} and gemma4.audio_rate == 16_000
    clip, picture = make_clip(3.0, settings=settings), make_image(640, 480)
    out = rendered(gemma4, {"audio": (clip,), "image": (picture,)})
    assert counts(out, "audio") == [family.tokens_for(3.0)] == [75]
    assert counts(out, "image") == [266]
    assert out.content_format == "openai"
    assert out.prompt.startswith("<bos><|turn>user\n") and out.prompt.endswith("<turn|>\n<|turn>model\n")
    assert "<|audio|>" in out.prompt and "<|image|>" in out.prompt
    # each range is the feature tokens between the item's markers
    ids, tokenizer = out.prompt_token_ids, gemma4.tokenizer
    for modality, (opener, closer) in family.ADAPTER.markers.items():
        (r,) = out.ranges[modality]
        assert ids[r.offset] == tokenizer.convert_tokens_to_ids(opener)
        assert ids[r.offset + r.length - 1] == tokenizer.convert_tokens_to_ids(closer)
    (heard,) = out.geometry["audio"]
    assert (heard.feature_frames, heard.heard_s) == (299, 3.0)
    (seen,) = out.geometry["image"]
    assert (seen.processed_size, seen.grid) == ((912, 672), (14, 19))
    assert family.image_from_count(266, picture, {}) == seen and family.image_from_count(267, picture, {}) is None
    # transformers' own processor, given the clip at 16 kHz and the picture, expands them to as many tokens
    hf = hf_counts(gemma4, "<|audio|><|image|>", audio=[clip.at(16_000)], images=[picture])
    assert [int((hf == out.token_ids[m]).sum()) for m in ("audio", "image")] == [75, 266]


def test_a_45_s_clip_is_heard_for_30_s(gemma4, settings):
    """vLLM counts the whole clip and caps it at ``audio_seq_length`` (750) with only a log line; its processor hands
    the tower all 45 s (4499 frames: no truncation), of which the prompt has room for the first 30 s. transformers
    alone cuts the clip at 30 s (2999 frames) and gives the same 750."""
    clip = make_clip(45.0, rate=44_100, settings=settings)
    out = rendered(gemma4, {"audio": (clip,)})
    assert counts(out, "audio") == [family.tokens_for(45.0)] == [750]
    (heard,) = out.geometry["audio"]
    assert heard.heard_s == 30.0 and heard.feature_frames == 2999
    assert out.engine_input["mm_kwargs"]["audio"][0]["input_features_mask"].data.shape[0] == 4499  # vLLM: uncut
    hf = hf_counts(gemma4, "<|audio|>", audio=[clip.at(16_000)])
    assert int((hf == out.token_ids["audio"]).sum()) == 750
    # what a remote server's count implies for the same clip
    sent = type("Sent", (), {"seconds": 45.0})()
    assert family.clip_from_count(750, sent, {}) == heard and family.clip_from_count(751, sent, {}) is None


@pytest.mark.parametrize("seconds", [0.05, 1.0, 2.5, 7.3, 29.99, 30.0, 31.0])
def test_the_count_rule_is_vllms(seconds):
    """The adapter's rule against vLLM's own (``Gemma4ProcessingInfo._compute_audio_num_tokens``)."""
    from vllm.model_executor.models.gemma4_mm import Gemma4ProcessingInfo

    samples = int(seconds * family.RATE)
    assert family.tokens_for(seconds) == Gemma4ProcessingInfo._compute_audio_num_tokens(samples, family.RATE, 750)


def test_the_tokenizer_carries_the_checkpoints_tokens_in_order(gemma4):
    """The added tokens in the real ids' order, all special; the config's token fields point at the same tokens as the
    checkpoint's (image 258880, audio 258881, boi 255999, eoi 258882, boa 256000, eoa 258883, video 258884)."""
    from vlm_demo.tiny_models.gemma4 import NAMED_TOKENS, SPECIAL_TOKENS, TOKEN_FIELDS

    added = {t.content: (i, t.special) for i, t in gemma4.tokenizer.added_tokens_decoder.items()}
    ids = [added[t][0] for t in SPECIAL_TOKENS]
    assert ids == sorted(ids) and all(added[t][1] for t in SPECIAL_TOKENS)
    real = {"<|image|>": 258880, "<|audio|>": 258881, "<|video|>": 258884, "<|image>": 255999, "<image|>": 258882,
            "<|audio>": 256000, "<audio|>": 258883}
    config = gemma4.model_config.hf_config
    assert all(getattr(config, f) == added[t][0] for f, t in TOKEN_FIELDS.items())
    assert {t: real[t] for t in TOKEN_FIELDS.values()} == {TOKEN_FIELDS[f]: v for f, v in {
        "image_token_id": 258880, "audio_token_id": 258881, "video_token_id": 258884, "boi_token_id": 255999,
        "eoi_token_id": 258882, "boa_token_id": 256000, "eoa_token_id": 258883}.items()}
    for name, token in NAMED_TOKENS.items():
        assert getattr(gemma4.tokenizer, name) == token


@pytest.mark.engine
async def test_the_engine_hears_a_clip_on_cpu(registry, settings):
    """vLLM 0.32's CPU GEMM (oneDNN) refuses the audio tower's strided input (``linear_end`` after the light
    convolution's transposes): without ``workarounds.ContiguousAudioTowerInputs`` the first clip kills the engine core
    ("Expected a.stride(-1) == 1"). The engine starts with it as its worker extension and answers a clip and a
    picture (a GPU's engine needs none)."""
    from vlm_demo.engine.processes import has_gpu
    from vlm_demo.engine.workarounds import GEMMA4_CPU_EXTENSION
    from vlm_demo.registry import Sampling
    from vlm_demo.service import ChatService, Done, Failed, Rendered

    manager = EngineManager(settings)
    try:
        service = ChatService(registry, manager, settings)
        request = ChatRequest(model=MODEL, turns=(Turn("user", "What do you hear?", {
            "audio": (make_clip(3.0, settings=settings),), "image": (make_image(320, 240),)}),),
            sampling=Sampling(temperature=0.0, top_p=1.0, max_tokens=4, ignore_eos=True))
        events = [e async for e in service.chat(request)]
        assert not any(isinstance(e, Failed) for e in events), events
        assert isinstance(events[-1], Done), events[-1]
        rendered = next(e for e in events if isinstance(e, Rendered)).rendered
        assert [r.length for r in rendered.ranges["audio"]] == [77]  # 75 + its markers
        extension = manager.engine(MODEL)._llm.vllm_config.parallel_config.worker_extension_cls
        assert extension == (None if has_gpu() else GEMMA4_CPU_EXTENSION)
    finally:
        manager.shutdown_all()
