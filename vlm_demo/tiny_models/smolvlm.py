"""The tiny SmolVLM2 (``HuggingFaceTB/SmolVLM2-2.2B-Instruct``): the checkpoint's preprocessor and processor
configs (1536-px long side, 384-px tiles of 81 tokens), its tokenizer's special tokens and chat template, with
tiny Llama and SigLIP towers."""

from __future__ import annotations

from pathlib import Path

from ..families.smolvlm import TILINGS
from .common import LM_HEAD_DIM, LM_SIZES, VISION_SIZES, build_tokenizer, padded_vocab_size, token_id, write_json

# The chat template of HuggingFaceTB/SmolVLM2-2.2B-Instruct (the SmolVLM one: no system prompt, role
# names capitalized, ":" with no space before a leading image). Content format "openai": each image part
# renders as "<image>". transformers swaps in a variant with a '<video>' branch only for video input.
CHAT_TEMPLATE = (
    "<|im_start|>{% for message in messages %}{{message['role'] | capitalize}}"
    "{% if message['content'][0]['type'] == 'image' %}{{':'}}{% else %}{{': '}}{% endif %}"
    "{% for line in message['content'] %}{% if line['type'] == 'text' %}{{line['text']}}"
    "{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}<end_of_utterance>\n"
    "{% endfor %}{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)

#: The tokenizer's special tokens, in id order: SmolLM2's 17 (ids 0-16), then the 128 SmolVLM adds
#: (ids 49152-49279: ``<global-img>``, the 36 ``<row_i_col_j>``, ``<fake_token_around_image>``,
#: ``<image>``, 88 reserved tokens, ``<end_of_utterance>``).
SPECIAL_TOKENS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<repo_name>", "<reponame>", "<file_sep>", "<filename>",
    "<gh_stars>", "<issue_start>", "<issue_comment>", "<issue_closed>", "<jupyter_start>", "<jupyter_text>",
    "<jupyter_code>", "<jupyter_output>", "<jupyter_script>", "<empty_output>",
    "<global-img>", *(f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)),
    "<fake_token_around_image>", "<image>", *(f"<|reserved_special_token_{i}|>" for i in range(88)),
    "<end_of_utterance>",
]

#: The tokenizer's named media tokens (tokenizer_config.json ``extra_special_tokens``).
MEDIA_TOKENS = {
    "fake_image_token": "<fake_token_around_image>", "image_token": "<image>",
    "global_image_token": "<global-img>", "end_of_utterance_token": "<end_of_utterance>",
}

CHECKPOINT = TILINGS[0]
"""SmolVLM2-2.2B's tiling: the long side to 1536, 384-px tiles of 81 tokens."""

#: The checkpoint's preprocessor_config.json (SmolVLMImageProcessor).
PREPROCESSOR_CONFIG = {
    "do_convert_rgb": True, "do_image_splitting": True, "do_normalize": True, "do_pad": True,
    "do_rescale": True, "do_resize": True, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
    "image_processor_type": "SmolVLMImageProcessor", "max_image_size": {"longest_edge": CHECKPOINT.tile},
    "processor_class": "SmolVLMProcessor", "resample": 1, "rescale_factor": 0.00392156862745098,
    "size": {"longest_edge": CHECKPOINT.longest_edge},
    "video_sampling": {"fps": 1, "max_frames": 64, "video_size": {"longest_edge": 384}},
}


def build(out: Path) -> None:
    """Write a tiny SmolVLM2-2.2B-Instruct-shaped model directory into ``out``."""
    tokenizer = build_tokenizer(SPECIAL_TOKENS, bos="<|im_start|>", eos="<end_of_utterance>", pad="<|im_end|>",
                                unk="<|endoftext|>", chat_template=CHAT_TEMPLATE,
                                extra={"extra_special_tokens": MEDIA_TOKENS})
    vocab = padded_vocab_size(tokenizer)
    config = {
        "architectures": ["SmolVLMForConditionalGeneration"],
        "model_type": "smolvlm",
        "image_token_id": token_id(tokenizer, "<image>"),
        "pad_token_id": token_id(tokenizer, "<|im_end|>"),
        "scale_factor": 3,
        "tie_word_embeddings": False,
        "vocab_size": vocab,
        "dtype": "bfloat16",
        "text_config": {
            "architectures": ["VLlama3ForCausalLM"], "model_type": "llama", **LM_SIZES,
            "head_dim": LM_HEAD_DIM, "max_position_embeddings": 16384, "rms_norm_eps": 1e-05,
            "rope_theta": 273768.0, "vocab_size": vocab, "tie_word_embeddings": False,
            "bos_token_id": token_id(tokenizer, "<|im_start|>"),
            "eos_token_id": token_id(tokenizer, "<end_of_utterance>"),
            "pad_token_id": token_id(tokenizer, "<|im_end|>"),
        },
        # The real tower: 1152 wide, 27 layers, 16 heads; the tile geometry is kept (384 px, patch 14).
        "vision_config": {
            "model_type": "smolvlm_vision", **VISION_SIZES, "image_size": CHECKPOINT.tile, "patch_size": 14,
            "max_image_size": {"longest_edge": CHECKPOINT.tile}, "size": {"longest_edge": CHECKPOINT.longest_edge},
        },
    }
    write_json(out / "config.json", config)
    write_json(out / "preprocessor_config.json", PREPROCESSOR_CONFIG)
    write_json(out / "processor_config.json",
               {"image_seq_len": CHECKPOINT.tokens, "processor_class": "SmolVLMProcessor"})
    tokenizer.save_pretrained(out)
