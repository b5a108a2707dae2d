"""The tiny LLaVA-1.5 (``llava-hf/llava-1.5-7b-hf``): its tokenizer, CLIP processor (336 px crop) and chat
template, with tiny Llama and CLIP towers."""

from __future__ import annotations

from pathlib import Path

from tokenizers import processors
from transformers import CLIPImageProcessor, CLIPVisionConfig, LlamaConfig, LlavaConfig, LlavaProcessor

from ..families.llava import PATCH, SIZE
from .common import CLIP_NORMALIZE, LM_SIZES, VISION_HIDDEN, VISION_SIZES, build_tokenizer, padded_vocab_size, token_id

# The chat template of llava-hf/llava-1.5-7b-hf (content format "openai": it emits <image> itself).
CHAT_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] != 'system' %}{{ message['role'].upper() + ': '}}"
    "{% endif %}{# Render all images first #}{% for content in message['content'] | selectattr('type', "
    "'equalto', 'image') %}{{ '<image>\n' }}{% endfor %}{# Render all text next #}{% if message['role'] "
    "!= 'assistant' %}{% for content in message['content'] | selectattr('type', 'equalto', 'text') %}"
    "{{ content['text'] + ' '}}{% endfor %}{% else %}{% for content in message['content'] | "
    "selectattr('type', 'equalto', 'text') %}{% generation %}{{ content['text'] + ' '}}{% endgeneration %}"
    "{% endfor %}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ 'ASSISTANT:' }}{% endif %}"
)


def build(out: Path) -> None:
    """Write a tiny LLaVA-1.5 model directory into ``out``."""
    tokenizer = build_tokenizer(["<unk>", "<s>", "</s>", "<image>", "<pad>"], bos="<s>", eos="</s>",
                                pad="<pad>", unk="<unk>", chat_template=CHAT_TEMPLATE)
    # Like the real LlamaTokenizerFast: <s> in front when special tokens are added.
    tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", token_id(tokenizer, "<s>"))])
    image_processor = CLIPImageProcessor(
        size={"shortest_edge": SIZE}, crop_size={"height": SIZE, "width": SIZE}, do_center_crop=True, resample=3,
        **CLIP_NORMALIZE,
    )
    processor = LlavaProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=PATCH,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,
        chat_template=CHAT_TEMPLATE,
    )
    config = LlavaConfig(
        vision_config=CLIPVisionConfig(
            **VISION_SIZES, image_size=SIZE, patch_size=PATCH, projection_dim=VISION_HIDDEN,
        ).to_dict(),
        text_config=LlamaConfig(
            **LM_SIZES, vocab_size=padded_vocab_size(tokenizer), max_position_embeddings=4096,
            bos_token_id=token_id(tokenizer, "<s>"), eos_token_id=token_id(tokenizer, "</s>"),
            pad_token_id=token_id(tokenizer, "<pad>"), tie_word_embeddings=False,
        ).to_dict(),
        image_token_index=token_id(tokenizer, "<image>"),
        vision_feature_layer=-2,
        vision_feature_select_strategy="default",
        projector_hidden_act="gelu",
    )
    config.architectures = ["LlavaForConditionalGeneration"]
    config.save_pretrained(out)
    processor.save_pretrained(out)
