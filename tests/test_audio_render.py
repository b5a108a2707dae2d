"""A clip through vLLM's renderer (no engine) on a tiny Qwen2-Audio (``vlm_demo/tiny_models/qwen2_audio.py``): the app takes the
modality, the placeholder, the feature token and the processor's rate from vLLM, resamples the clip itself (48 kHz
stereo to 16 kHz mono), and the expansion is the checkpoint's count (25 tokens a second, 750 at most: the 30-s cap),
the same as transformers' own Qwen2-Audio processor gives. A template that drops the clip's placeholder under the
detected content format (the checkpoint's PR #13 template checks ``'audio' in content``) is rendered as "string",
which the app chooses and the render says."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from vlm_demo.engine import EngineManager
from vlm_demo.errors import InputError
from vlm_demo.intake import load_audio
from vlm_demo.profile import spec_for_directory
from vlm_demo.registry import EngineArgs
from vlm_demo.service import ChatRequest, Turn, to_openai_messages

from vlm_demo.families import qwen2_audio as family
from vlm_demo.tiny_models import qwen2_audio as tiny

PR13_TEMPLATE = (
    "{% set audio_count = namespace(value=0) %}{% for message in messages %}{% if loop.first and message['role'] != "
    "'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}<|im_start|>{{ message['role'] "
    "}}\n{% if message['content'] is string %}{{ message['content'] }}<|im_end|>\n{% else %}{% for content in "
    "message['content'] %}{% if 'audio' in content or 'audio_url' in content or message['type'] == 'audio' %}"
    "{% set audio_count.value = audio_count.value + 1 %}Audio {{ audio_count.value }}: "
    "<|audio_bos|><|AUDIO|><|audio_eos|>\n{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}"
    "<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""The chat template of the checkpoint's unmerged PR #13 (chat_template.json): its audio test misses vLLM's
``{"type": "audio"}`` parts."""


def clip(seconds: float, rate: int = 48_000, name: str = "talk.wav", settings=None):
    t = np.arange(int(seconds * rate)) / rate
    wave = 0.3 * np.sin(2 * np.pi * 440 * t)
    out = io.BytesIO()
    sf.write(out, np.stack([wave, wave], axis=1), rate, format="WAV", subtype="PCM_16")
    return load_audio(out.getvalue(), settings, name=name)


@pytest.fixture(scope="module")
def qwen2_audio(tmp_path_factory, registry, settings):
    """The tiny model's renderer, as for a model directory (``--model DIR``), clips allowed."""
    out = tmp_path_factory.mktemp("tiny-qwen2-audio")
    tiny.build(out)
    spec = dataclasses.replace(spec_for_directory(registry, out),
                               engine_args=EngineArgs(limit_mm_per_prompt={"audio": 2}, load_format="dummy",
                                                      max_model_len=4096))
    return out, spec, EngineManager(settings).start_renderer(spec)


def rendered(renderer, spec, clips, settings):
    request = ChatRequest(model=spec.name, turns=(Turn("user", "What is said?", {"audio": tuple(clips)}),))
    return asyncio.run(renderer.render(to_openai_messages(request), {}))


def test_a_clip_costs_what_the_checkpoint_says(qwen2_audio, settings):
    _, spec, renderer = qwen2_audio
    assert renderer.modalities == ("audio",) and renderer.audio_rate == 16_000
    three, long = clip(3.0, settings=settings), clip(45.0, rate=44_100, settings=settings)
    out = rendered(renderer, spec, [three, long], settings)
    assert [r.length for r in out.ranges["audio"]] == [family.tokens_for(3.0), family.tokens_for(45.0)] == [75, 750]
    audio_id = renderer.tokenizer.convert_tokens_to_ids(family.AUDIO_TOKEN)
    assert out.token_ids["audio"] == audio_id
    assert all(set(out.prompt_token_ids[r.offset:r.offset + r.length]) == {audio_id} for r in out.ranges["audio"])
    assert out.prompt.count("<|audio_bos|><|AUDIO|><|audio_eos|>") == 2 and out.content_format == "openai"
    # transformers' own processor, given the clip at 16 kHz, expands it to as many tokens
    from transformers import AutoProcessor

    hf = AutoProcessor.from_pretrained(renderer.spec.path)
    ids = hf(text="<|audio_bos|><|AUDIO|><|audio_eos|>", audio=[three.at(16_000)], sampling_rate=16_000,
             return_tensors="np")["input_ids"][0]
    assert int((ids == audio_id).sum()) == 75


def test_a_template_that_drops_the_clip_is_rendered_as_string(qwen2_audio, tmp_path, registry, settings):
    """The PR #13 template under vLLM's detected "openai" parts writes no placeholder (vLLM then fails: "Failed to
    apply prompt replacement"); the app renders such a model as "string" (vLLM writes the placeholder) and says so."""
    out, spec, _ = qwen2_audio
    other = tmp_path / "pr13"
    shutil.copytree(out, other)
    (other / "chat_template.json").write_text(json.dumps({"chat_template": PR13_TEMPLATE}))
    changed = dataclasses.replace(spec, name="tiny-qwen2-audio-pr13", path=str(other))
    renderer = EngineManager(settings).start_renderer(changed)
    assert renderer.content_format == "string"
    found = rendered(renderer, changed, [clip(3.0, settings=settings)], settings)
    assert found.content_format == "string" and [r.length for r in found.ranges["audio"]] == [75]
    assert "Audio 1: <|audio_bos|><|AUDIO|><|audio_eos|>" in found.prompt
    # what "openai" (vLLM's detection) would have done: the clip refused inside vLLM's processor (an assertion
    # there, a traceback once: one line now)
    forced = dataclasses.replace(changed, name="tiny-qwen2-audio-pr13-openai", chat_template_content_format="openai")
    with pytest.raises(InputError, match=r"the chat template left out the placeholder of audio 1 \(vLLM: Failed to "
                       r"apply prompt replacement"):
        rendered(EngineManager(settings).start_renderer(forced), forced, [clip(3.0, settings=settings)], settings)
