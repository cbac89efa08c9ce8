"""The one prompt renderer: a record -> the user text the model sees, for training and evaluation.

Every prompt is a Jinja template rendered with the same variables, whoever asks for it, in the
sandboxed, bounded environment of every user template (``easyvideor1/templates.py``):

- the training templates (``data.prompt_template``): ``none`` (the question as written), ``plain``
  (question, options block, the task's answer instruction) and ``reasoning`` (the same, asking to
  think first), or a ``.jinja`` file;
- ``benchmark``, the generic evaluation prompt, and a benchmark spec file's ``prompt``;
- the evaluation styles: ``direct`` asks for the answer only, ``thinking`` asks to reason first.
  A template may fix its style (``reasoning`` always thinks); otherwise the caller's style decides.

So trainer validation, ``eval --data`` with the run's config and ``filter`` render a record to the
same text. Benchmarks whose official evaluation builds its own prompt (OVO-Bench, MINERVA, ...)
keep a prompt function in their spec (``evaluation/benchmarks/``).

Template variables: ``problem`` (the question as written), ``question`` (stripped, numbered image
placeholders made plain: ``<image 1>`` -> ``<image>``), ``options`` (list), ``instruction`` (the
answer instruction of the record's reward task for the style; :func:`answer_instruction`),
``style``, ``reasoning`` (bool), ``problem_type``, ``record`` (every field of the record) and every
record field by name. The answer is withheld, so a template cannot leak it into the prompt.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import Any

from ..errors import ConfigError, UserError
from ..rewards.instructions import answer_instruction
from ..templates import TemplateError, UserTemplate, compile_template, read_template_file
from .records import Record, RecordError, iter_raw, parse_record

STYLES = ("direct", "thinking")

# Built-in templates, each written once. Whitespace matters: these are the exact texts of
# the prompts trained and evaluated on (Jinja keeps newlines around `{% %}` tags as written).
_QUESTION = "{{ problem | trim }}{% if options %}\nOptions:\n{{ options | join('\\n') }}{% endif %}\n{{ instruction }}"
_BENCHMARK = """\
{% if options %}Select the best answer to the following multiple-choice question based on the video.
Question: {{ question or "Describe the video in detail." }}
Options:
{{ options | join("\\n") }}{% else %}Answer the following question based on the video.
Question: {{ question or "Describe the video in detail." }}{% endif %}
{{ instruction }}"""

# name -> (source, the style the template fixes or None, whether it decides `enable_thinking`)
_BUILTINS: dict[str, tuple[str, str | None, bool]] = {
    "none": ("{{ problem }}", None, False),
    "plain": (_QUESTION, None, True),
    "reasoning": (_QUESTION, "thinking", True),
    "benchmark": (_BENCHMARK, None, True),
}
TEMPLATE_NAMES = tuple(_BUILTINS)
# a record's fields a template never sees: the gold answer and the offline response
_WITHHELD = ("answer", "offline_output")


class PromptError(UserError):
    """A template that cannot render a record; the message names the template and the record."""


def check_style(style: str) -> None:
    if style not in STYLES:
        raise ConfigError(f"unknown prompt style {style!r}: direct or thinking")


def question_text(record: Record) -> str:
    """The record's question with numbered image placeholders made plain (``<image 1>`` -> ``<image>``)."""
    return re.sub(r"<image \d+>", "<image>", record.problem).strip()


@dataclasses.dataclass(frozen=True)
class PromptTemplate:
    """A Jinja prompt template, callable as ``(record, style) -> text`` (a benchmark spec's ``prompt``).

    Args:
        source: the Jinja text.
        origin: where it comes from, for error messages ("built-in plain", a file path and key).
        style: the style the template fixes (``reasoning``: ``thinking``), or None: the caller's.
        sets_thinking: whether the style also decides a thinking-template model's
            ``enable_thinking`` (the built-in question templates); otherwise the chat template's
            own default holds unless ``data.thinking`` is set.
    """

    source: str
    origin: str
    style: str | None = None
    sets_thinking: bool = True

    def __post_init__(self) -> None:
        self._compiled()  # a syntax error is found where the template is read, not at the first record

    def effective_style(self, style: str = "direct") -> str:
        check_style(style)
        return self.style or style

    def thinking(self, style: str = "direct", override: bool | None = None) -> bool | None:
        """``enable_thinking`` for this template in ``style``: ``override`` (``data.thinking``) when
        set, else on exactly when the prompt asks to think (None: the chat template's default)."""
        if override is not None:
            return override
        return self.effective_style(style) == "thinking" if self.sets_thinking else None

    def __call__(self, record: Record, style: str = "direct") -> str:
        style = self.effective_style(style)
        reasoning = style == "thinking"
        fields = {k: v for k, v in record.to_dict().items() if k not in _WITHHELD}
        variables = {
            **fields,
            "problem": record.problem,
            "question": question_text(record),
            "options": list(record.options or []),
            "instruction": answer_instruction(record.problem_type, record.options, reasoning=reasoning),
            "style": style,
            "reasoning": reasoning,
            "problem_type": record.problem_type,
            "record": fields,
        }
        try:
            return self._compiled().render(variables)
        except TemplateError as e:
            hint = " (the answer is withheld from prompts)" if "answer" in e.reason else ""
            raise PromptError(
                f"{self.origin}: record {record.problem_id!r} ({record.source}): {e.reason}{hint}"
            ) from None

    def _compiled(self) -> UserTemplate:
        """The template compiled in the sandboxed, bounded environment every user template renders in."""
        try:
            return compile_template(self.source, self.origin)
        except TemplateError as e:
            raise PromptError(str(e)) from None


@functools.lru_cache(maxsize=32)
def prompt_template(name: str) -> PromptTemplate:
    """The template ``name``: a built-in (``none``, ``plain``, ``reasoning``, ``benchmark``) or a
    ``.jinja`` file (rendered with the training semantics: its own ``enable_thinking`` default)."""
    if name in _BUILTINS:
        source, style, sets_thinking = _BUILTINS[name]
        return PromptTemplate(source, f"built-in prompt template {name!r}", style, sets_thinking)
    if not str(name).endswith(".jinja"):
        raise PromptError(
            f"unknown prompt template {name!r}: use {', '.join(TEMPLATE_NAMES)} or a .jinja file"
        )
    try:
        source = read_template_file(name)
    except UserError as e:
        raise PromptError(f"prompt {e}") from None
    return PromptTemplate(source, f"prompt template {name}", None, sets_thinking=False)


def check_renders(template: str, files: list[str]) -> None:
    """Render the template named ``template`` once on the first readable record of ``files``: at
    start-up, a template that compiles but cannot render a record (a variable records lack, a
    division by zero, a bound) stops the run before any model loads, naming the template and the
    record (a ConfigError for ``data.prompt_template``), not at the first prompt. A file or record
    that cannot be read is passed over here: the data checks that follow name it."""
    for path in files:
        try:
            for source, raw in iter_raw(path):
                try:
                    record = parse_record(raw, source)
                except RecordError:
                    continue
                try:
                    prompt_template(template)(record)
                except PromptError as e:
                    raise ConfigError(f"data.prompt_template: {e}") from None
                return
        except (OSError, RecordError):
            continue


def format_question(record: Record, template: str = "plain", style: str = "direct") -> str:
    """The user text for ``record`` under the template named ``template`` (see :func:`prompt_template`)."""
    return prompt_template(template)(record, style)


BENCHMARK_PROMPT = prompt_template("benchmark")


_PLACEHOLDER = re.compile(r"<(video|image)>")


def build_content(record: Record, text: str | None = None) -> list[dict[str, Any]]:
    """User-message content: media items at their ``<video>``/``<image>`` placeholders, in order.

    Without placeholders the media go first, then the text (the reference silently produced no
    vision tokens in that case). Placeholders must match the number of media of their kind.
    """
    text = record.problem if text is None else text
    kinds = _PLACEHOLDER.findall(text)
    n_video, n_image = kinds.count("video"), kinds.count("image")
    for kind, n, have in (("video", n_video, len(record.videos)), ("image", n_image, len(record.images))):
        if n and n != have:
            raise RecordError(
                record.source,
                f"{n} <{kind}> placeholder(s) but {have} {kind}(s)",
                "problem",
                record.problem_id,
            )
    content: list[dict[str, Any]] = []
    # media without placeholders of their kind go before the text
    if not n_image:
        content += [{"type": "image"} for _ in record.images]
    if not n_video:
        content += [{"type": "video"} for _ in record.videos]
    pos = 0
    for m in _PLACEHOLDER.finditer(text):
        if text[pos : m.start()]:
            content.append({"type": "text", "text": text[pos : m.start()]})
        content.append({"type": m.group(1)})
        pos = m.end()
    if text[pos:] or not content:
        content.append({"type": "text", "text": text[pos:]})
    return content
