"""A tiny tokenizer and processor of a model family built offline (no hub access), for tests and
the demo.

The tokenizer is a byte-level BPE trained on a few KB of text, plus the family's special tokens and
a chat template in the family's format; the image and video processors are the real transformers
classes with the model family's patch size. ``AutoProcessor.from_pretrained(dir)`` loads the result offline.
"""

from __future__ import annotations

import os

from .families import get_family


def chat_template(model_family: str = "qwen3_vl") -> str:
    """The tiny tokenizer's chat template for a family (its tokens part writes it)."""
    return get_family(model_family).tokens.tiny_chat_template()


CHAT_TEMPLATE = chat_template()

_CORPUS = (
    "Watch the video carefully, then answer the question. What colour is the moving square? "
    "Options: A. red B. green C. blue D. yellow. How many times does the screen flash? "
    "When is the white circle visible? Give the start and end time in seconds. Where is the circle? "
    "What word is written in the top-left corner? Does a white circle appear in the video? Yes No "
    'The answer is 0 1 2 3 4 5 6 7 8 9 10. {"time": [1.5, 3.0]} {"boxes": [10, 20, 30, 40]} '
    "First, briefly explain your reasoning, then give the final answer inside the answer tags. "
    # tool calls as the Qwen templates write them (a real tokenizer merges JSON punctuation too)
    '{"name": "seek", "arguments": {"start_s": 3, "end_s": 4}} {"name": "frame_at", "arguments": '
    '{"time_s": 2.5}} {"name": "zoom", "arguments": {"time_s": 1, "box": [0, 0, 500, 500]}} '
)


def build_tokenizer(vocab_size: int = 512, model_family: str = "qwen3_vl"):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokens = get_family(model_family).tokens
    special = list(tokens.special_tokens)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([_CORPUS] * 20, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=tokens.eos_tokens[0],
        pad_token=special[0],
        additional_special_tokens=special[1:],
        **tokens.tokenizer_fields(),
    )
    fast.chat_template = chat_template(model_family)
    return fast


def processor_parts(family) -> dict:
    """The tiny processor's parts: the fixture's own, else the family's image and video processor
    classes with its patch sizes and video-processor settings."""
    if family.fixture.processor_parts is not None:
        return family.fixture.processor_parts()
    import transformers

    frames, vision = family.frames, family.vision
    sizes = dict(
        patch_size=frames.patch_size,
        merge_size=frames.merge_size,
        temporal_patch_size=frames.temporal_patch_size,
    )
    return {
        "image_processor": getattr(transformers, vision.image_processor_class)(**sizes),
        "video_processor": getattr(transformers, vision.video_processor_class)(
            **sizes, **vision.video_processor_kwargs()
        ),
    }


def build_processor(model_family: str = "qwen3_vl"):
    """A real transformers processor of the family around the tiny tokenizer."""
    import transformers

    family = get_family(model_family)
    return getattr(transformers, family.vision.processor_class)(
        **processor_parts(family),
        tokenizer=build_tokenizer(model_family=family.model_type),
        chat_template=chat_template(family.model_type),
    )


def tiny_config(
    model_family: str, vocab_size: int, token_ids: dict[str, int], hidden: int = 128, layers: int = 2
):
    """A sub-1M-parameter config of the family's real architecture."""
    return get_family(model_family).fixture.config(vocab_size, token_ids, hidden=hidden, layers=layers)


def make_tiny_model(
    out_dir: str,
    model_family: str = "qwen3_vl",
    seed: int = 0,
    hidden: int = 128,
    layers: int = 2,
    text_fields: dict | None = None,
):
    """Write a tiny random-weight model + tokenizer + processor to ``out_dir`` (loads with
    from_pretrained). ``text_fields`` override fields of the text config (e.g. Qwen3.5's
    linear-attention head counts)."""
    import torch
    from transformers import AutoModelForImageTextToText, GenerationConfig

    tokens = get_family(model_family).tokens
    processor = build_processor(model_family)
    tok = processor.tokenizer
    ids = {t: tok.convert_tokens_to_ids(t) for t in tokens.special_tokens}
    config = tiny_config(model_family, len(tok), ids, hidden=hidden, layers=layers)
    for name, value in (text_fields or {}).items():
        setattr(config.text_config, name, value)
    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_config(config)
    model.generation_config = GenerationConfig(
        eos_token_id=[ids[t] for t in tokens.eos_tokens],
        pad_token_id=ids[tokens.special_tokens[0]],
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
    )
    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(out_dir)
    processor.save_pretrained(out_dir)
    from .released import write_released_layout

    write_released_layout(out_dir)
    return out_dir
