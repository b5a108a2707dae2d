"""Media intake without an engine: every odd or hostile image and URL is decoded on purpose or refused
with a clear message (issue 5's cases 1-10), and the settings that drive it."""

from __future__ import annotations

import base64
import dataclasses
import re
import time

import pytest
from PIL import Image

from vlm_demo.errors import InputError
from vlm_demo.intake import is_url, load_image, load_image_url
from vlm_demo.intake.urls import internal_reason
from vlm_demo.settings import Settings

from .cases import ACCEPTED, BAD_URLS, REFUSED, encoded
from .intake_servers import local_internet, png_bytes, url_settings


@pytest.mark.parametrize("case", list(ACCEPTED))
def test_odd_modes_become_rgb(case, settings):
    make, pixels = ACCEPTED[case]
    image = load_image(make(), settings)
    assert image.mode == "RGB"
    for xy, rgb in pixels.items():
        assert all(abs(a - b) <= 3 for a, b in zip(image.getpixel(xy), rgb, strict=True)), (xy, image.getpixel(xy))


def test_a_photo_is_turned_as_its_exif_orientation_says(settings):
    """A phone's photo stored sideways with EXIF orientation 6 (turn 90 degrees clockwise) reaches the model upright,
    from a file or from a Pillow image (which is left as it was)."""
    import io

    picture = Image.new("RGB", (60, 40), (200, 30, 30))
    picture.paste((30, 30, 200), (0, 0, 30, 40))  # blue on the left: on top once turned clockwise
    exif = Image.Exif()
    exif[0x0112] = 6
    buffer = io.BytesIO()
    picture.save(buffer, format="JPEG", exif=exif, quality=95)
    opened = Image.open(io.BytesIO(buffer.getvalue()))
    for source in (buffer.getvalue(), opened):
        upright = load_image(source, settings)
        assert upright.size == (40, 60)
        top, bottom = upright.getpixel((20, 5)), upright.getpixel((20, 55))
        assert top[2] > 150 > top[0] and bottom[0] > 150 > bottom[2], (top, bottom)
    assert opened.size == (60, 40) and opened.getexif().get(0x0112) == 6  # the caller's image, untouched


@pytest.mark.parametrize("case", list(REFUSED))
def test_bad_files_are_refused_clearly(case, settings):
    make, message = REFUSED[case]
    data = make()
    assert len(data) < 50_000  # small files: the bombs only declare their size
    t0 = time.perf_counter()
    with pytest.raises(InputError, match=message):
        load_image(data, settings, name="upload.png")
    assert time.perf_counter() - t0 < 2.0


def test_upload_over_the_byte_limit(settings, tmp_path):
    small = dataclasses.replace(settings, max_upload_bytes=10_000)
    path = tmp_path / "big.png"
    path.write_bytes(encoded(Image.effect_noise((200, 200), 50).convert("RGB"), "PNG"))
    with pytest.raises(InputError, match="larger than 10,000 bytes"):
        load_image(path, small)
    assert load_image(path, settings).size == (200, 200)


def test_allowed_formats_setting(settings):
    only_png = dataclasses.replace(settings, allowed_image_formats=("PNG",))
    with pytest.raises(InputError, match="JPEG images are not accepted"):
        load_image(encoded(Image.new("RGB", (8, 8)), "JPEG"), only_png)


def test_settings_from_environment():
    s = Settings.from_env({"VLM_DEMO_URL_FETCH": "yes", "VLM_DEMO_URL_ALLOWED_HOSTS": "a.example, b.example",
                           "VLM_DEMO_MAX_TURNS": "6", "VLM_DEMO_URL_TIMEOUT_S": "2.5"})
    assert s.url_fetch is True and s.url_allowed_hosts == ("a.example", "b.example")
    assert s.max_turns == 6 and s.url_timeout_s == 2.5
    assert Settings.from_env({"VLM_DEMO_URL_FETCH": "off"}).url_fetch is False
    assert Settings().url_fetch is False and Settings().url_allowed_hosts == ()  # off by default
    with pytest.raises(Exception, match="VLM_DEMO_URL_FETCH"):
        Settings.from_env({"VLM_DEMO_URL_FETCH": "maybe"})


# --- URLs (issue 5, cases 1-7) ------------------------------------------------------------------------

@pytest.fixture
def internet(monkeypatch):
    with local_internet(monkeypatch) as net:
        yield net


@pytest.mark.parametrize("case", list(BAD_URLS))
async def test_bad_urls_are_refused(case, internet, settings):
    url, message = BAD_URLS[case]
    t0 = time.perf_counter()
    with pytest.raises(InputError, match=message):
        await load_image_url(url.format(port=internet.port), url_settings(settings))
    assert time.perf_counter() - t0 < 8.0  # the 5-s budget holds, with slack for a busy machine
    assert all("93.184.216.34" in seen for seen in internet.seen)  # nothing else was ever contacted


async def test_allowed_urls_work_and_redirects_are_rechecked(internet, settings):
    s = url_settings(settings)
    image = await load_image_url(internet.url("/ok.png"), s)
    assert image.size == (64, 48) and image.getpixel((1, 1)) == (200, 40, 40)
    assert (await load_image_url(internet.url("/to-ok"), s)).size == (64, 48)
    assert (await load_image_url(internet.url("/ok.png", host="cdn.example.com"), s)).size == (64, 48)
    with pytest.raises(InputError, match="too many redirects"):
        await load_image_url(internet.url("/to-ok"), dataclasses.replace(s, url_max_redirects=0))
    data = "data:image/png;base64," + base64.b64encode(png_bytes((5, 4))).decode()
    assert (await load_image_url(data, s)).size == (5, 4)


async def test_url_fetching_is_off_by_default(internet, settings):
    with pytest.raises(InputError, match="fetching image URLs is off"):
        await load_image_url(internet.url("/ok.png"), settings)
    assert internet.seen == []
    data = "data:image/png;base64," + base64.b64encode(png_bytes((5, 4))).decode()
    assert (await load_image_url(data, settings)).size == (5, 4)  # data: URLs need no fetching


@pytest.mark.parametrize("address, reason", [
    ("8.8.8.8", None), ("2606:4700::1111", None), ("127.0.0.2", "loopback"), ("0.0.0.0", "unspecified"),
    ("192.0.2.1", "private"), ("100.100.1.1", "not a public address"), ("224.0.0.1", "multicast"),
    ("2002:7f00:1::", "loopback"),
    ("64:ff9b::a00:5", "private"), ("fe80::1", "link-local"), ("::ffff:10.1.2.3", "private"),
])
def test_internal_addresses(address, reason):
    got = internal_reason(address)
    assert (got is None) if reason is None else (reason in got), got


def test_is_url():
    assert is_url("https://x.example/a.png") and is_url("data:image/png;base64,AAAA") and is_url("file:///etc")
    assert not is_url("pictures/a.png") and not is_url("../a.png") and not is_url("C:\\pics\\a.png")


LIMIT_CASES = {
    # name: (turns, system, mm_kwargs, the message)
    "too many turns": ([("user", "hi", 0), ("assistant", "yes", 0)] * 3 + [("user", "and?", 0)], "", {},
                       "7 messages; the limit is 6"),
    "long message": ([("user", "x" * 101, 0)], "", {}, "longer than 100 characters"),
    "long system prompt": ([("user", "hi", 0)], "y" * 101, {}, "system prompt is longer than 100"),
    "more images than limit_mm_per_prompt": ([("user", "hi", 5)], "", {}, "5 images in one message; "
                                             "tiny-qwen2.5-vl takes at most 4"),
    "conversation image cap": ([("user", "a", 3), ("assistant", "b", 0), ("user", "c", 3)], "", {},
                               "the conversation holds 6 images; tiny-qwen2.5-vl takes at most 4"),
    "slider out of range": ([("user", "hi", 1)], "", {"max_pixels": 10**9}, "max_pixels=1000000000 is outside"),
    "unknown image setting": ([("user", "hi", 1)], "", {"max_partition": 4}, "has no setting 'max_partition'"),
    "setting of the wrong type": ([("user", "hi", 1)], "", {"max_pixels": "lots"},
                                  "max_pixels must be a whole number (got 'lots')"),
    "bool for a slider": ([("user", "hi", 1)], "", {"max_pixels": True}, "max_pixels must be a whole number"),
    "empty question": ([("user", " ", 0)], "", {}, "type a question or add an image"),
}


@pytest.mark.parametrize("case", list(LIMIT_CASES))
async def test_request_limits_are_checked_before_any_engine(case, registry, settings):
    """The service's limits (turns, text, images per message and per conversation against the model's
    ``limit_mm_per_prompt``, slider ranges) refuse a request with a clear message before an engine is
    asked for anything: none is started."""
    from vlm_demo.engine import EngineManager
    from vlm_demo.service import ChatRequest, ChatService, Failed, Turn

    turns, system, mm_kwargs, message = LIMIT_CASES[case]
    small = dataclasses.replace(settings, max_turns=6, max_text_chars=100, max_images_per_turn=8)
    engines = EngineManager(small)
    service = ChatService(registry, engines, small)
    picture = Image.new("RGB", (32, 32))
    request = ChatRequest(model="tiny-qwen2.5-vl", system=system, mm_kwargs=mm_kwargs,
                          turns=tuple(Turn(role, text, {"image": (picture,) * n} if n else {}) for role, text, n in turns))
    with pytest.raises(InputError, match=re.escape(message)):
        await service.inspect(request)
    events = [event async for event in service.chat(request)]
    assert len(events) == 1 and isinstance(events[0], Failed) and message in events[0].message
    assert engines.loaded() == [] and engines.starts == 0
