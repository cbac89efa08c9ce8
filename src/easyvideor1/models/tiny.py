"""A tiny Qwen-VL tokenizer and processor built offline (no hub access), for tests and the demo.

The tokenizer is a byte-level BPE trained on a few KB of text, plus the Qwen special tokens and a
Qwen-style chat template; the image and video processors are the real transformers classes with
the model family's patch size. ``AutoProcessor.from_pretrained(dir)`` loads the result offline.
"""

from __future__ import annotations

import os

QWEN_SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<think>",
    "</think>",
    "<answer>",
    "</answer>",
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
    'The answer is 0 1 2 3 4 5 6 7 8 9 10. {"time": [1.5, 3.0]} {"boxes": [10, 20, 30, 40]} '
    "First, briefly explain your reasoning, then give the final answer inside the answer tags. "
)


def build_tokenizer(vocab_size: int = 512):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=QWEN_SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([_CORPUS] * 20, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=QWEN_SPECIAL_TOKENS[1:],
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_processor(model_family: str = "qwen3vl"):
    """A real transformers Qwen-VL processor around the tiny tokenizer."""
    import transformers

    # family -> (processor class, video processor class, patch size)
    families = {
        "qwen3vl": ("Qwen3VLProcessor", "Qwen3VLVideoProcessor", 16),
        "qwen2_5vl": ("Qwen2_5_VLProcessor", "Qwen2VLVideoProcessor", 14),
    }
    if model_family not in families:
        raise ValueError(f"tiny models exist for {', '.join(families)}, not {model_family!r}")
    processor_cls, video_cls, patch = families[model_family]
    sizes = dict(patch_size=patch, merge_size=2, temporal_patch_size=2)
    return getattr(transformers, processor_cls)(
        image_processor=transformers.Qwen2VLImageProcessor(**sizes),
        video_processor=getattr(transformers, video_cls)(**sizes),
        tokenizer=build_tokenizer(),
        chat_template=CHAT_TEMPLATE,
    )


def save_processor(out_dir: str, model_family: str = "qwen3vl") -> str:
    os.makedirs(out_dir, exist_ok=True)
    build_processor(model_family).save_pretrained(out_dir)
    return out_dir


def tiny_config(
    model_family: str, vocab_size: int, token_ids: dict[str, int], hidden: int = 128, layers: int = 2
):
    """A sub-1M-parameter config of the family's real architecture."""
    common = dict(
        image_token_id=token_ids["<|image_pad|>"],
        video_token_id=token_ids["<|video_pad|>"],
        vision_start_token_id=token_ids["<|vision_start|>"],
        vision_end_token_id=token_ids["<|vision_end|>"],
        tie_word_embeddings=False,
    )
    text = dict(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=4096,
        bos_token_id=token_ids["<|endoftext|>"],
        eos_token_id=token_ids["<|im_end|>"],
        pad_token_id=token_ids["<|endoftext|>"],
    )
    if model_family == "qwen3vl":
        from transformers import Qwen3VLConfig

        text["rope_parameters"] = {
            "rope_type": "default",
            "rope_theta": 10000.0,
            "mrope_section": [6, 5, 5],
            "mrope_interleaved": True,
        }
        vision = dict(
            depth=2,
            hidden_size=64,
            intermediate_size=128,
            num_heads=2,
            patch_size=16,
            spatial_merge_size=2,
            temporal_patch_size=2,
            out_hidden_size=hidden,
            num_position_embeddings=256,
            deepstack_visual_indexes=[0],
        )
        return Qwen3VLConfig(text_config=text, vision_config=vision, **common)
    from transformers import Qwen2_5_VLConfig

    text["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [6, 5, 5]}
    vision = dict(
        depth=2,
        hidden_size=64,
        intermediate_size=128,
        num_heads=2,
        patch_size=14,
        spatial_merge_size=2,
        temporal_patch_size=2,
        out_hidden_size=hidden,
        window_size=56,
        fullatt_block_indexes=[1],
        tokens_per_second=2,
    )
    return Qwen2_5_VLConfig(text_config=text, vision_config=vision, **common)


def make_tiny_model(
    out_dir: str, model_family: str = "qwen3vl", seed: int = 0, hidden: int = 128, layers: int = 2
):
    """Write a tiny random-weight model + tokenizer + processor to ``out_dir`` (loads with from_pretrained)."""
    import torch
    from transformers import AutoModelForImageTextToText, GenerationConfig

    processor = build_processor(model_family)
    tok = processor.tokenizer
    ids = {t: tok.convert_tokens_to_ids(t) for t in QWEN_SPECIAL_TOKENS}
    config = tiny_config(model_family, len(tok), ids, hidden=hidden, layers=layers)
    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_config(config)
    model.generation_config = GenerationConfig(
        eos_token_id=[ids["<|im_end|>"], ids["<|endoftext|>"]],
        pad_token_id=ids["<|endoftext|>"],
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
    )
    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(out_dir)
    processor.save_pretrained(out_dir)
    return out_dir
