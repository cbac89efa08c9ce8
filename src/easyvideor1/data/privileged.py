"""The teacher's view of a prompt in self-distillation: the student's prompt plus privileged context.

A self-teacher (``algorithm.distill.teacher: self``) is the policy itself, shown something the
student never sees, most often the record's reference answer, so that its next-token distribution
over the student's own response says which tokens a model that knows the answer would have
written. The context is a template rendered per record and appended to the user turn as a last
text part; the media items stay where they are, so the teacher's prompt holds the same videos and
images as the student's (the same frames; with a frozen tower the same cached features).

``algorithm.distill.context`` names the source: ``answer`` (the built-in template below) or a
``.jinja`` file rendered in the sandboxed environment every user template renders in, with the
record's fields (``answer`` included: that is the point) and ``question`` (its text, without the
media placeholders). The student's prompt is
rendered by ``data/prompt.py``, which withholds the answer; this module is the only place that
shows it to a model.
"""

from __future__ import annotations

import dataclasses
import functools
import re

from ..errors import ConfigError, UserError
from ..templates import TemplateError, compile_template, read_template_file
from .dataset import MediaSample
from .prompt import PromptError, question_text

# Written for a teacher that should judge the student's tokens, not rewrite the answer: it reads the
# reference answer after the question and is asked to reason to it on its own (the framing OPSD and
# RLSD use for a privileged self-teacher).
ANSWER_CONTEXT = (
    "\n\nFor reference, a correct final answer to this question is: {{ answer }}\n"
    "Solve the question yourself; use the reference only to check your reasoning."
)

CONTEXT_SOURCES = ("answer",)  # the built-in sources; anything else must be a .jinja file
# the question's media placeholders, left out of a context's ``question`` (the media stay in the prompt)
_MEDIA = re.compile(r"<(video|image)>")


@dataclasses.dataclass(frozen=True)
class PrivilegedContext:
    """A compiled context template; :meth:`samples` gives the teacher's view of a step's prompts."""

    source: str
    text: str

    def render(self, sample: MediaSample) -> str:
        """The context for ``sample``'s record; a record the template cannot render is named."""
        record = sample.record
        fields = record.to_dict()
        try:
            return compile_template(self.text, self.origin).render(
                {**fields, "question": _MEDIA.sub("", question_text(record)).strip(), "record": fields}
            )
        except TemplateError as e:
            raise PromptError(
                f"{self.origin}: record {record.problem_id!r} ({record.source}): {e.reason}"
            ) from None

    @property
    def origin(self) -> str:
        return f"algorithm.distill.context {self.source}"

    def samples(self, samples: list[MediaSample]) -> list[MediaSample]:
        """Each sample with its context appended to the user turn (loaded media shared, not copied)."""
        return [
            dataclasses.replace(s, content=[*s.content, {"type": "text", "text": self.render(s)}])
            for s in samples
        ]


@functools.lru_cache(maxsize=8)
def privileged_context(source: str) -> PrivilegedContext:
    """The context named ``source`` (``answer`` or a ``.jinja`` file), compiled: a missing file or a
    syntax error is refused here, at start-up, naming the key."""
    if source == "answer":
        text = ANSWER_CONTEXT
    elif str(source).endswith(".jinja"):
        try:
            text = read_template_file(source)
        except UserError as e:
            raise ConfigError(f"algorithm.distill.context: {e}") from None
    else:
        raise ConfigError(
            f"algorithm.distill.context={source!r}: use {', '.join(CONTEXT_SOURCES)}, none or a .jinja file"
        )
    context = PrivilegedContext(source, text)
    try:
        compile_template(text, context.origin)
    except TemplateError as e:
        raise ConfigError(str(e)) from None
    return context
