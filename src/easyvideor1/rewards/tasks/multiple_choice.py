"""Multiple choice: the option letter, read strictly.

Where the letter comes from, in order:
1. the `<answer>` tag: a letter ("B", "(B)", "B. Red"), or an option's text ("Red"), or, failing
   that, a statement or the rules below applied to the tag's content;
2. an explicit final statement ("the final answer is B", "Therefore, the final answer is: B");
3. priority rules over the response without its reasoning, in the style of lmms-eval:
   start 10 (a letter opening the response: "B.", "(B)", "B" alone on its first line) > end 9 >
   answer phrase 7 ("the answer is B", "Option B is correct") > "(B)" 6 > "B." 5 > "B:" 4 > "B)" 3 >
   " B " 2 > bare letter 0, ties going to the last occurrence (a chain of thought mentions options
   before concluding). A negated letter ("not A", "rather than A", "unlike A") is never the answer.

Official evaluators read upper-case letters only (Video-MME's `extract_characters_regex` strips
answer prefixes and takes the first of A-J; lmms-eval and VLMEvalKit match "(B)", "B.", " B "); a
lower-case letter is read here only where it cannot be English: a whole answer tag or statement
("<answer>b</answer>", "Answer: b", "b. green"), and for b-h and j also as the first word of a
statement ("Answer: b because ..."); never "a" or "i" inside a sentence, never "e.g." / "i.e.".

Hack resistance: a response that names several different letters as its answer ("A or B", "A, C",
"A+B", "A -> B", "A|B|C|D", "(A)(B)(C)(D)", "B or maybe A", two different `<answer>` tags, "B. <text
of option A>") has no answer and scores 0, and so does one that only rules a letter out ("not A"); an
upper-case "A" or "I" used as a word ("A man ...", "I think ...") and the lower-case article "a" are
not letters; letters beyond the number of options are wrong. Every answer the response commits to
(each `<answer>` tag, statement and `\\boxed{}` outside the reasoning: `parsing.committed_answers`)
must name the same letter: "\\boxed{A} \\boxed{B}", "The answer is A. The answer is B." and
"<answer>A</answer> The answer is B." score 0, while "<answer>B</answer> The answer is B because
..." is B. Invisible characters are removed first, so "A\\u200bB" is the word "AB", not a letter.

Letters: options are lettered A-Z (their own label, or their position when unlabelled); a record
with more than 26 options is refused with a `GroundTruthError` naming the count (no letter would
name option 27, and wrapping to A again would make two options one answer). Only the tail of a long response is read
(`parsing.MAX_SCORED_CHARS`) and every pattern is linear, so scoring time is bounded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from easyvideor1.rewards.numbers import parse_number
from easyvideor1.rewards.parsing import (
    ExtractedAnswer,
    clean_short_answer,
    extract_answer,
    final_statement,
    normalize_text,
    reading_form,
    scored_tail,
    strip_think,
)
from easyvideor1.rewards.registry import register_task
from easyvideor1.rewards.sample import GroundTruthError, Sample, TaskScore

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_DEFAULT_LETTERS = LETTERS[:10]  # A-J when the options are unknown

_OPTION_LABEL_RE = re.compile(r"^\s*(?:\(([A-Z])\)|\[([A-Z])\]|([A-Z])\s*[.:：)])\s*(.*)$", re.DOTALL)
_LEAD_WORD_RE = re.compile(r"^(?:option|choice|answer)\s*[:：]?\s*", re.IGNORECASE)
_SINGLE_LETTER_RE = re.compile(r"[\(\[]?([A-Za-z])[\)\]]?")
# A lower-case option label at the start of an answer ("b. green", "(c) blue"), not "e.g." / "i.e.".
_LOWER_LABEL_RE = re.compile(r"^\s*+[\(\[]?([a-z])(?![a-z]|\.[a-z]\.)(?=[\)\]]|\s*+[.:：)])")
# Separators between letters offered together: "A or B", "A, C", "A/B", "A+B", "A -> B", "A|B",
# "(A)(B)", "B or maybe A".
_SEPARATOR = (
    r"(?:[,/&;|+]|->|=>|→|<->|\bor\b|\band\b|\bnor\b|\bmaybe\b|\bperhaps\b|\bpossibly\b|\bprobably\b)"
)
_LETTER_LIST_RE = re.compile(
    rf"(?<![A-Za-z])[\(\[]?[A-Z][\)\]]?(?:(?:\s*+{_SEPARATOR})++\s*+[\(\[]?[A-Z][\)\]]?(?![A-Za-z])"
    r"|(?<=[\)\]])\s*+[\(\[][A-Z][\)\]](?![A-Za-z]))+"
)
_LETTER_LIST_SPLIT_RE = re.compile(rf"\s*+(?:{_SEPARATOR}|[()\[\]])\s*+|\s++")
_LIST_LETTER_RE = re.compile(r"(?<![A-Za-z])[A-Z](?![A-Za-z])")
_LEADING_LETTER_RE = re.compile(r"^[\s*(\[]*+([A-Z])(?![A-Za-z])")
# b-h and j opening a statement ("Answer: b because ..."): not English words, unlike "a" and "i".
_LEADING_LOWER_RE = re.compile(r"^[\s*(\[]*+([b-hj])(?![A-Za-z]|\.[a-z]\.)")
# "A man", "I think": an upper-case A or I followed by a lower-case word is English, not an option...
_WORD_USE_RE = re.compile(r"\s+[a-z]")
# ... unless the word says the letter is the answer: "A is correct", "A is the best option".
_CHOSEN_AFTER_RE = re.compile(r"\s++is\s++(?:the\s++)?(?:correct|right|best|answer)\b", re.IGNORECASE)
# A letter ruled out ("not A", "rather than (A)", "unlike option A") is not the answer; checked in
# a short window before each letter, so the cost stays linear.
_NEGATION_RE = re.compile(
    r"(?:\bnot|n't|\bnor|\bunlike|\brather\s++than|\binstead\s++of|\bexcept(?:\s++for)?|\bother\s++than"
    r"|\bbesides|\bexcluding|\bversus|\bvs\.?)\s*+(?:(?:option|choice|answer)\s++)?[\(\[]?$",
    re.IGNORECASE,
)
_NEGATION_WINDOW = 40

# Whitespace runs are matched possessively (`\s*+`): adjacent optional runs that backtrack into
# each other made "answer" + " " * n cubic.
_RULES: tuple[tuple[int, re.Pattern[str]], ...] = (
    (
        10,
        re.compile(
            r"^\s*+(?:\*\*)?[\(\[]?(?P<L>[A-Z])(?:[\)\]]|[.:：](?!\w)|(?=\s*+$)|(?=[ \t]*+\r?\n)|(?=\*\*))"
        ),
    ),
    (9, re.compile(r"(?<![A-Za-z'’])[\(\[]?(?P<L>[A-Z])[\)\]]?(?:\*\*)?[.!。]?\s*+$")),
    (
        7,
        re.compile(
            r"(?i:(?:answer|(?:best|correct|right)\s++(?:option|choice))\s*+(?:is|would\s++be|should\s++be|=)?"
            r"\s*+[:：]?|\bI\s++(?:choose|select|pick|go\s++with)|选择?|答案\s*+(?:是|为|：|:)?)"
            r"\s*+(?i:option\s++|choice\s++)?(?:\*\*)?[\(\[]?(?P<L>[A-Z])(?![A-Za-z])"
        ),
    ),
    (
        7,
        re.compile(
            r"(?<![A-Za-z])(?i:option\s++|choice\s++)?[\(\[]?(?P<L>[A-Z])[\)\]]?"
            r"(?=\s++(?i:is\s++(?:the\s++)?(?:correct|right|best|answer)\b))"
        ),
    ),
    (6, re.compile(r"\((?P<L>[A-Z])\)")),
    (5, re.compile(r"(?<![A-Za-z])(?P<L>[A-Z])\.(?!\w)")),
    (4, re.compile(r"(?<![A-Za-z])(?P<L>[A-Z])[:：]")),
    (3, re.compile(r"(?<![A-Za-z(])(?P<L>[A-Z])\)")),
    (2, re.compile(r"(?<!\S)(?P<L>[A-Z])(?!\S)")),
    (0, re.compile(r"(?<![A-Za-z])(?P<L>[A-Z])(?![A-Za-z])")),
)


@dataclass(frozen=True)
class ChoiceExtraction:
    """The option a response chose.

    Attributes:
        letter: the chosen letter (also set when out of range), or None.
        status: "ok", "no_answer" (nothing found), "ambiguous" (several letters named as the
            answer) or "out_of_range" (a letter beyond the options).
        source: "answer_tag", "final_statement", "text" (a bare short answer), "rules" or "none".
        well_formed: the `<answer>` tag holds exactly one valid letter or option text.
    """

    letter: str | None
    status: str
    source: str
    well_formed: bool = False


def option_texts(options: list[str] | None) -> dict[str, str]:
    """Letter -> normalised option text, from "A. text", "A: text", "(A) text" or position."""
    return dict(_option_texts(tuple(options or ())))


@lru_cache(maxsize=4096)
def _option_texts(options: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    if len(options) > len(LETTERS):
        raise GroundTruthError(
            f"multiple-choice record has {len(options)} options; letters A-Z name at most {len(LETTERS)}"
        )
    texts: dict[str, str] = {}
    for index, option in enumerate(options):
        match = _OPTION_LABEL_RE.match(option)
        if match:
            letter = next(group for group in match.groups()[:3] if group)
            text = match.group(4)
        else:
            letter, text = LETTERS[index], option
        texts[letter] = _normalize_option(text)
    return tuple(texts.items())


def _normalize_option(text: str) -> str:
    return normalize_text(text).rstrip(".。!?;,").strip()


def _letters_of_phrase(text: str, texts: dict[str, str], lowercase: bool = False) -> set[str] | None:
    """Letters a short answer names: "B", "(B)", "B. Red", "A or B", or an option's text; None if none.

    A lone lower-case letter ("b") counts only with `lowercase` (inside an answer tag, where it
    cannot be the article "a" of a sentence).
    """
    value = _LEAD_WORD_RE.sub("", clean_short_answer(text))
    if not value:
        return None
    single = _SINGLE_LETTER_RE.fullmatch(value)
    if single and (lowercase or single.group(1).isupper()):
        return {single.group(1).upper()}
    tokens = [token for token in _LETTER_LIST_SPLIT_RE.split(value) if token]
    if len(tokens) > 1 and all(len(token) == 1 and (token.isupper() or lowercase) for token in tokens):
        if all(token.upper() in LETTERS for token in tokens):
            return {token.upper() for token in tokens}  # "A or B", "A+B", "(A)(B)": a hedge
    lower_label = _LOWER_LABEL_RE.match(value) if lowercase else None
    if lower_label:
        at = lower_label.start(1)
        value = value[:at] + value[at].upper() + value[at + 1 :]
    labelled = _OPTION_LABEL_RE.fullmatch(value)
    if labelled:
        letter = next(group for group in labelled.groups()[:3] if group)
        rest = _normalize_option(labelled.group(4))
        # "B. <text of option A>" names two options: a hedge, not an answer.
        others = {other for other, option in texts.items() if rest and option == rest and other != letter}
        if others and texts.get(letter) != rest:
            return {letter, *others}
        # Otherwise the text must be the option's own (or anything short when options are unknown);
        # "A: red. Option B: green. ..." is a sentence for the rules, not a labelled answer.
        if not rest or texts.get(letter) == rest or (not texts and len(rest) <= 60 and "\n" not in rest):
            return {letter}
    normalized = _normalize_option(value)
    hits = {letter for letter, option in texts.items() if option == normalized}
    if not hits and len(value) < 40:
        number = parse_number(value)
        if number is not None:
            for letter, option in texts.items():
                option_number = parse_number(option) if re.fullmatch(r"[-+\d.,/%\s]+", option) else None
                if option_number is not None and option_number.value == number.value:
                    hits.add(letter)
    return hits or None


def _verdict(letters: set[str], valid: str, source: str, well_formed: bool = False) -> ChoiceExtraction:
    if len(letters) > 1:
        return ChoiceExtraction(None, "ambiguous", source)
    letter = next(iter(letters))
    if letter not in valid:
        return ChoiceExtraction(letter, "out_of_range", source)
    return ChoiceExtraction(letter, "ok", source, well_formed)


def _is_word_use(text: str, match: re.Match[str]) -> bool:
    end = match.end("L")
    return (
        match.group("L") in "AI"
        and _WORD_USE_RE.match(text, end) is not None
        and _CHOSEN_AFTER_RE.match(text, end) is None
    )


def _is_negated(text: str, match: re.Match[str]) -> bool:
    start = match.start()
    return _NEGATION_RE.search(text, max(0, start - _NEGATION_WINDOW), start) is not None


def priority_letter(text: str, valid: str = _DEFAULT_LETTERS) -> str | None:
    """The letter chosen by the priority rules (highest priority, then last occurrence), or None."""
    found = _priority_match(text, valid)
    return found[2] if found else None


def _priority_match(text: str, valid: str) -> tuple[int, int, str] | None:
    best: tuple[int, int, str] | None = None
    for priority, pattern in _RULES:
        if best is not None and priority < best[0]:
            break  # rules are ordered by priority: nothing below can win
        for match in pattern.finditer(text):
            letter = match.group("L")
            if letter in valid and not _is_word_use(text, match) and not _is_negated(text, match):
                position = match.start("L")
                if best is None or (priority, position) > best[:2]:
                    best = (priority, position, letter)
    return best


def _from_rules(text: str, valid: str, source: str) -> ChoiceExtraction:
    best = _priority_match(text, valid)
    if best is None:
        return ChoiceExtraction(None, "no_answer", "none" if source == "rules" else source)
    for listing in _LETTER_LIST_RE.finditer(text):
        if (
            listing.start() <= best[1] < listing.end()
            and len(set(_LIST_LETTER_RE.findall(listing.group()))) > 1
        ):
            return ChoiceExtraction(None, "ambiguous", source)
    return ChoiceExtraction(best[2], "ok", source)


def _from_statement(
    statement: str, texts: dict[str, str], valid: str, source: str
) -> ChoiceExtraction | None:
    # What a statement names is an answer, so a lone lower-case letter is one ("Answer: b").
    letters = _letters_of_phrase(statement, texts, lowercase=True)
    if letters:
        return _verdict(letters, valid, source)
    leading = _LEADING_LETTER_RE.match(statement)
    if leading and not (
        leading.group(1) in "AI"
        and _WORD_USE_RE.match(statement, leading.end(1))
        and not _CHOSEN_AFTER_RE.match(statement, leading.end(1))
    ):
        return _verdict({leading.group(1)}, valid, source)
    leading = _LEADING_LOWER_RE.match(statement)
    if leading:
        return _verdict({leading.group(1).upper()}, valid, source)
    return None


def choose(answer: ExtractedAnswer, body: str, options: list[str] | None) -> ChoiceExtraction:
    """`extract_choice` on an already extracted answer and reasoning-free body."""
    texts = option_texts(options)
    valid = LETTERS[: len(options)] if options else _DEFAULT_LETTERS
    committed = _committed_letters(answer, texts, valid)
    if committed is None:
        return ChoiceExtraction(None, "ambiguous", answer.source)
    choice = _choose(answer, body, texts, valid)
    if choice.letter is not None and committed and committed != {choice.letter}:
        return ChoiceExtraction(None, "ambiguous", choice.source)
    return choice


def _committed_letters(answer: ExtractedAnswer, texts: dict[str, str], valid: str) -> set[str] | None:
    """The letters of the response's commitments (tags, statements, boxes); None when they name
    different letters (a commitment may itself be a hedge: "The answer is A or B").

    A statement or box that names no letter is prose and is skipped; when the tags differ as text
    ("<answer>B</answer><answer>(B)</answer>"), each tag must name a letter, and the same one.
    """
    letters: set[str] = set()
    for candidate in answer.candidates:
        found = _from_statement(candidate.text, texts, valid, candidate.source)
        if found is None:
            if answer.ambiguous and candidate.source == "answer_tag":
                return None
            continue
        if found.status == "ambiguous":
            return None
        letters.add(found.letter)
    return letters if len(letters) <= 1 else None


def _choose(answer: ExtractedAnswer, body: str, texts: dict[str, str], valid: str) -> ChoiceExtraction:
    if answer.source == "answer_tag" and answer.text:
        letters = _letters_of_phrase(answer.text, texts, lowercase=True)
        if letters:
            return _verdict(letters, valid, "answer_tag", well_formed=True)
        statement = final_statement(answer.text)
        found = _from_statement(statement, texts, valid, "answer_tag") if statement else None
        if found:
            return found
        return _from_rules(answer.text, valid, "answer_tag")
    body = reading_form(scored_tail(body))  # answers come last; bounded time on any response
    statement = final_statement(body)
    found = _from_statement(statement, texts, valid, "final_statement") if statement else None
    if found:
        return found
    letters = _letters_of_phrase(body, texts) if len(body) < 200 else None
    if letters:
        return _verdict(letters, valid, "text")
    return _from_rules(body, valid, "rules")


def extract_choice(response: str, options: list[str] | None = None) -> ChoiceExtraction:
    """The option letter a response chose, with a status that tells "no answer" from "wrong".

    Shared by training rewards and evaluation (which reports the share of `no_answer`).
    """
    return choose(extract_answer(response), strip_think(response), options)


def truth_letter(truth: str, options: list[str] | None) -> str:
    """The correct letter of a ground truth ("B", "<answer>B</answer>" already unwrapped, or option text)."""
    letters = _letters_of_phrase(truth, option_texts(options), lowercase=True)
    if not letters or len(letters) != 1:
        raise GroundTruthError(f"multiple-choice ground truth is not one option: {truth[:100]!r}")
    return next(iter(letters))


def letter_range(options: list[str] | None) -> str:
    """The options' letters as prose: "A, B, C, or D", "A or B", "A"; "" without options."""
    letters = list(option_texts(options)) if options else []
    if len(letters) > 2:
        return ", ".join(letters[:-1]) + f", or {letters[-1]}"
    return " or ".join(letters)


def choice_instruction(options: list[str] | None) -> str:
    """Ask for the option's letter, naming the record's letter range when the options are known."""
    letters = letter_range(options)
    return f"Answer with the option's letter{f' ({letters})' if letters else ''} inside <answer></answer>."


@register_task(
    "multiple_choice",
    aliases=("multiple choice", "multiple-choice", "mc", "mcq", "multi choice", "choice", "single choice"),
    instruction=choice_instruction,
)
def score_multiple_choice(sample: Sample) -> TaskScore:
    """1 if the chosen letter is the ground truth's, else 0 (no answer, hedges and bad letters included)."""
    truth = truth_letter(sample.truth, sample.options)
    choice = choose(sample.answer, sample.body, sample.options)
    correct = choice.status == "ok" and choice.letter == truth
    return TaskScore(float(correct), choice.well_formed, choice.letter if choice.status == "ok" else None)
