"""A tiny Qwen-VL tokenizer and processor built offline (no hub access), for tests and the demo.

The tokenizer is a byte-level BPE trained on a few KB of text, plus the Qwen special tokens and a
Qwen-style chat template; the image and video processors are the real transformers classes with
the model family's patch size. ``AutoProcessor.from_pretrained(dir)`` loads the result offline.
"""

from __future__ import annotations

import os

QWEN_SPECIAL_TOKENS = [
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
    "<|image_pad|>", "<|video_pad|>", "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>",
    "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<think>", "</think>", "<answer>", "</answer>",
]

# Qwen-style template: media items render as vision placeholders, in message order.
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif item['type'] == 'video' %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}{% endfor %}{% endif %}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

_CORPUS = (
    "Watch the video carefully, then answer the question. What colour is the moving square? "
    "Options: A. red B. green C. blue D. yellow. How many times does the screen flash? "
    "When is the white circle visible? Give the start and end time in seconds. Where is the circle? "
    "What word is written in the top-left corner? Does a white circle appear in the video? Yes No "
    "The answer is 0 1 2 3 4 5 6 7 8 9 10. {\"time\": [1.5, 3.0]} {\"boxes\": [10, 20, 30, 40]} "
    "First, briefly explain your reasoning, then give the final answer inside the answer tags. "
)


def build_tokenizer(vocab_size: int = 512):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=QWEN_SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tok.train_from_iterator([_CORPUS] * 20, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        additional_special_tokens=QWEN_SPECIAL_TOKENS[1:],
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_processor(model_family: str = "qwen3vl"):
    """A real transformers Qwen-VL processor around the tiny tokenizer."""
    from transformers import Qwen2VLImageProcessor

    tokenizer = build_tokenizer()
    if model_family == "qwen3vl":
        from transformers import Qwen3VLProcessor, Qwen3VLVideoProcessor

        patch = 16
        image = Qwen2VLImageProcessor(patch_size=patch, merge_size=2, temporal_patch_size=2)
        video = Qwen3VLVideoProcessor(patch_size=patch, merge_size=2, temporal_patch_size=2)
        return Qwen3VLProcessor(image_processor=image, video_processor=video, tokenizer=tokenizer,
                                chat_template=CHAT_TEMPLATE)
    from transformers import Qwen2_5_VLProcessor, Qwen2VLVideoProcessor

    patch = 14
    image = Qwen2VLImageProcessor(patch_size=patch, merge_size=2, temporal_patch_size=2)
    video = Qwen2VLVideoProcessor(patch_size=patch, merge_size=2, temporal_patch_size=2)
    return Qwen2_5_VLProcessor(image_processor=image, video_processor=video, tokenizer=tokenizer,
                               chat_template=CHAT_TEMPLATE)


def save_processor(out_dir: str, model_family: str = "qwen3vl") -> str:
    os.makedirs(out_dir, exist_ok=True)
    build_processor(model_family).save_pretrained(out_dir)
    return out_dir
