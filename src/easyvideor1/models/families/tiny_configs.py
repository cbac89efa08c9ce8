"""The fields the families' tiny offline configs share (``TinyFixture.config``): the decoder sizes,
the Qwen text model and vision towers, the placeholder-token ids."""

from __future__ import annotations

from typing import Any

# M-RoPE of the tiny models' rotary dims (head_dim 32 -> 16 frequencies split t/h/w)
TINY_MROPE = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [6, 5, 5]}


def tiny_decoder_fields(vocab_size: int, hidden: int, layers: int) -> dict[str, Any]:
    """The decoder sizes every tiny config shares: 4 attention heads of 32 (2 for keys and values)
    and an MLP twice as wide as the model."""
    return dict(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=4096,
    )


def qwen_text_config(vocab_size: int, token_ids: dict[str, int], hidden: int, layers: int) -> dict[str, Any]:
    """Text-model fields shared by the tiny Qwen configs."""
    return dict(
        **tiny_decoder_fields(vocab_size, hidden, layers),
        bos_token_id=token_ids["<|endoftext|>"],
        eos_token_id=token_ids["<|im_end|>"],
        pad_token_id=token_ids["<|endoftext|>"],
    )


# the top-level config fields of a Qwen-VL config that hold placeholder-token ids, by token
QWEN_TOKEN_ID_FIELDS = {
    "image_token_id": "<|image_pad|>",
    "video_token_id": "<|video_pad|>",
    "vision_start_token_id": "<|vision_start|>",
    "vision_end_token_id": "<|vision_end|>",
}


def token_id_fields(token_id_fields: dict[str, str], token_ids: dict[str, int]) -> dict[str, Any]:
    """The top-level fields of a tiny config: each ``{field: token}`` of ``token_id_fields`` as that
    token's id, and untied embeddings."""
    return {field: token_ids[token] for field, token in token_id_fields.items()} | {
        "tie_word_embeddings": False
    }


def qwen_token_fields(token_ids: dict[str, int]) -> dict[str, Any]:
    """Top-level placeholder-token ids of a Qwen-VL config."""
    return token_id_fields(QWEN_TOKEN_ID_FIELDS, token_ids)


def tiny_qwen_config(config_class: str, vocab_size, token_ids, hidden, layers, vision, **text_fields):
    """A tiny Qwen-VL config of transformers class ``config_class``: the shared text model with the
    family's ``text_fields`` (rotary split, experts, ...) and the family's ``vision`` tower."""
    import transformers

    text = {**qwen_text_config(vocab_size, token_ids, hidden, layers), **text_fields}
    return getattr(transformers, config_class)(
        text_config=text, vision_config=vision, **qwen_token_fields(token_ids)
    )


def tiny_vision_config(patch_size: int, **fields: Any) -> dict[str, Any]:
    """A 2-block, 2-head vision tower merging 2x2 patches and 2 frames, plus the family's ``fields``."""
    return dict(
        depth=2, num_heads=2, patch_size=patch_size, spatial_merge_size=2, temporal_patch_size=2, **fields
    )


def qwen3_vision_config(hidden: int, deepstack: bool = True) -> dict[str, Any]:
    """A 2-block Qwen3-VL-style vision tower (patch 16), used by Qwen3-VL and Qwen3.5."""
    cfg = tiny_vision_config(
        16, hidden_size=64, intermediate_size=128, out_hidden_size=hidden, num_position_embeddings=256
    )
    if deepstack:
        cfg["deepstack_visual_indexes"] = [0]
    return cfg
