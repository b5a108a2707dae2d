"""A clip through vLLM's renderer (no engine) on a tiny Qwen2-Audio (``vlm_demo/tiny_models/qwen2_audio.py``): the app takes the
modality, the placeholder, the feature token and the processor's rate from vLLM, resamples the clip itself (48 kHz
stereo to 16 kHz mono), and the expansion is the checkpoint's count (25 tokens a second, 750 at most: the 30-s cap),
the same as transformers' own Qwen2-Audio processor gives. A template that drops the clip's placeholder under the
detected content format (the checkpoint's PR #13 template checks ``'audio' in content``) is rendered as "string",
which the app chooses and the render says."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from vlm_demo.engine import EngineManager
from vlm_demo.errors import InputError
from vlm_demo.intake import load_audio
from vlm_demo.profile import spec_for_directory
from vlm_demo.registry import EngineArgs
from vlm_demo.service import ChatRequest, Turn, to_openai_messages

from vlm_demo.families import qwen2_audio as family
from vlm_demo.tiny_models import qwen2_audio as tiny

from .conftest import make_clip, make_clip_bytes, run_cli

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
    three, long = make_clip(3.0, settings=settings), make_clip(45.0, rate=44_100, settings=settings)
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
    found = rendered(renderer, changed, [make_clip(3.0, settings=settings)], settings)
    assert found.content_format == "string" and [r.length for r in found.ranges["audio"]] == [75]
    assert "Audio 1: <|audio_bos|><|AUDIO|><|audio_eos|>" in found.prompt
    # what "openai" (vLLM's detection) would have done: the clip refused inside vLLM's processor (an assertion
    # there, a traceback once: one line now)
    forced = dataclasses.replace(changed, name="tiny-qwen2-audio-pr13-openai", chat_template_content_format="openai")
    with pytest.raises(InputError, match=r"the chat template left out the placeholder of audio 1 \(vLLM: Failed to "
                       r"apply prompt replacement"):
        rendered(EngineManager(settings).start_renderer(forced), forced, [make_clip(3.0, settings=settings)], settings)


async def test_the_expansion_says_what_a_clip_cost(service, settings, tmp_path):
    """Issue 47's "what a clip cost": per clip its seconds, its rate before and after, the feature frames, the tokens,
    the family's rule, its range, and what the cap cut (a 45-s clip to Qwen2-Audio: 30 s heard) in the row, the line
    under the budget, ``inspect --json`` and the waveform (its unheard end greyed out past a red line); the CLI's
    ids are vLLM's renderer's."""
    from vlm_demo.inspector import to_json, waveform
    from vlm_demo.ui.panels import budget_html, image_table

    five, long = make_clip(5.0, settings=settings), make_clip(45.0, 44_100, name="long.flac", settings=settings)
    request = ChatRequest(model="tiny-qwen2-audio", turns=(Turn("user", "What is said?", {"audio": (five, long)}),))
    inspection = await service.inspect(request, start_engine=False)
    a, b = inspection.items["audio"]
    assert (a.count, a.seconds, a.rate_in, a.rate, a.feature_frames, a.heard_s) == (125, 5.0, 48_000, 16_000, 500, 5.0)
    assert (b.count, b.seconds, b.rate_in, b.feature_frames, b.heard_s) == (750, 45.0, 44_100, 3000, 30.0)
    shown = budget_html(inspection)
    assert "5.0 s at 48 kHz -&gt; 16 kHz: 125 tokens (500 feature frames; 25 tokens a second" in shown
    assert "30.0 of 45.0 s heard: the last 15.0 s were cut; split the clip" in shown
    assert [row[4:] for row in image_table(inspection)] == [["5.0 s, 48 → 16 kHz", "500 frames"],
                                                             ["45.0 s, 44.1 → 16 kHz", "3,000 frames, last 15.0 s cut"]]
    assert inspection.geometry_note is None  # (no picture: no grid to miss)
    found = to_json(inspection)
    assert found["num_audio_tokens"] == 875 and [c["seconds"] for c in found["audios"]] == [5.0, 45.0]
    assert "orig_size" not in found["audios"][0] and "seconds" not in json.dumps(found["images"])
    picture = waveform(b, inspection.frames["audio"][1])
    w, h = picture.size
    cut_x = round(30 / 45 * (w - 1))
    heard, unheard = picture.getpixel((cut_x // 2, h // 2)), picture.getpixel(((cut_x + w) // 2, h // 2))
    assert heard[1] > heard[0] + 40 and abs(unheard[0] - unheard[1]) < 12, (heard, unheard)  # teal, then grey
    assert picture.getpixel((cut_x, h // 3))[0] > 200  # the red line where hearing stops

    path = tmp_path / "long.wav"
    path.write_bytes(make_clip_bytes(45.0, 44_100))
    result = run_cli("inspect", "--model", "tiny-qwen2-audio", "--audio", str(path), "--text", "What is said?", "--json")
    assert result.returncode == 0, result.stderr[-2000:]
    cli = json.loads(result.stdout)
    alone = await service.inspect(ChatRequest(model="tiny-qwen2-audio", turns=(Turn(
        "user", "What is said?", {"audio": (load_audio(path, settings),)}),)), start_engine=False)
    assert cli["prompt_token_ids"] == list(alone.prompt_token_ids)
    assert [(c["count"], c["heard_s"], c["seconds"], c["rate_in"]) for c in cli["audios"]] == [(750, 30.0, 45.0, 44_100)]


@pytest.mark.parametrize("model", ["tiny-qwen2-audio", "tiny-qwen2.5-omni"])
async def test_a_clip_too_short_to_hear_is_named_in_one_line(model, service, settings):
    """A 10-ms clip is no token at all: vLLM refuses it with the samples themselves in its message (Omni's printed
    the array); the app names the clip and its length in one line, and a 50-ms clip is one token."""
    tiny_clip = make_clip(0.01, name="click.wav", settings=settings)
    with pytest.raises(InputError) as caught:
        await service.inspect(ChatRequest(model=model, turns=(Turn("user", "Hi", {"audio": (tiny_clip,)}),)),
                              start_engine=False)
    assert str(caught.value) == f"click.wav (0.01 s) is too short for {model} to hear: it would be no token at all"
    one = await service.inspect(ChatRequest(model=model, turns=(Turn("user", "Hi", {"audio": (
        make_clip(0.05, settings=settings),)}),)), start_engine=False)
    assert one.items["audio"][0].count == 1 and budget_line(one).startswith("0.05 s at 48 kHz -> 16 kHz: 1 token (")


def budget_line(inspection) -> str:
    from vlm_demo.inspector import clip_text

    return clip_text(inspection.items["audio"][0])
