"""Benchmark prompts against their official construction, quoted here from the source.

OVO-Bench: github.com/JoeLeelyf/OVO-Bench, constant.py (templates) and utils/OVOBench.py
(OVOBenchOffline.build_prompt). VideoReasonBench: github.com/llyx97/video_reason_bench,
vlmevalkit/vlmeval/dataset/video_reasoning_bench.py (build_prompt: the question text only) and
vlmevalkit/vlmeval/dataset/utils/video_reasoning_bench.py (extract_final_answer, get_judge_prompt).
MINERVA: VLMEvalKit's vlmeval/dataset/minerva.py (Minerva.build_prompt, video input), five choices
per the MINERVA paper (arXiv 2505.00681).
"""

from __future__ import annotations

import re

import pytest

from easyvideor1.data.records import parse_record
from easyvideor1.evaluation import get_benchmark
from easyvideor1.evaluation.benchmarks.videoreasonbench import final_answer
from easyvideor1.rewards import answer_instruction
from easyvideor1.rewards.registry import load_callable
from tests.evaluation.benchmark_cases import JUDGE, UNSHIPPED, gold_response, write_unshipped

# --- OVO-Bench constant.py, verbatim (trailing spaces included) -----------------------------------
BR_PROMPT_TEMPLATE = """
Question: {}
Options:
{}

Respond only with the letter corresponding to your chosen option (e.g., A, B, C). \nDo not include any additional text or explanation in your response.
"""
REC_PROMPT_TEMPLATE = """
You're watching a video in which people may perform a certain type of action repetively. \nThe person performing this kind of action are referred to as 'they' in the following statement.
You're task is to count how many times have different people in the video perform this kind of action in total.
One complete motion counts as one. \nNow, answer the following question: {}
Provide your answer as a single number (e.g., 0, 1, 2, 3…) indicating the total count.
Do not include any additional text or explanation in your response.
"""
SSR_PROMPT_TEMPLATE = """
You're watching a tutorial video which contain a sequential of steps. \nThe following is one step from the whole procedures: \n{}
Your task is to determine if the man or woman in the video is currently performing this step.
Answer only with “Yes” or “No”.
Do not include any additional text or explanation in your response.
"""
CRR_PROMPT_TEMPLATE = """
You're responsible of answering questions based on the video content. \nThe following question are relevant to the latest frames, i.e. the end of the video.
{}
Decide whether existing visual content, especially latest frames, i.e. frames that near the end of the video, provide enough information for answering the question.
Answer only with “Yes” or “No”.
Do not include any additional text or explanation in your response.
"""


def official_ovo_prompt(task: str, question: str, options: list[str] | None) -> str:
    """utils/OVOBench.py build_prompt: options are the raw option texts, lettered here
    ('; '.join(f'{chr(65 + i)}. {option}') + ';'); REC's question is "How many times did they
    <activity>?", SSR formats the step, CRR the question."""
    if task == "REC":
        return REC_PROMPT_TEMPLATE.format(question)
    if task == "SSR":
        return SSR_PROMPT_TEMPLATE.format(question)
    if task == "CRR":
        return CRR_PROMPT_TEMPLATE.format(question)
    formatted = "; ".join(f"{chr(65 + i)}. {o}" for i, o in enumerate(options)) + ";"
    return BR_PROMPT_TEMPLATE.format(question, formatted)


def _records(name, tmp_path):
    spec = get_benchmark(name)
    write_unshipped(name, spec.annotation, tmp_path)
    return spec, spec.load(str(tmp_path))


def test_ovobench_prompts_are_the_official_ones(tmp_path):
    spec, records = _records("ovobench", tmp_path)
    tasks = set()
    for rec in records:
        task = rec.extra["ovo_task"]
        tasks.add(task)
        raw_options = [re.sub(r"^[A-Z]: ", "", o) for o in rec.options or []]  # the release's raw texts
        assert spec.build_prompt(rec, "direct") == official_ovo_prompt(task, rec.problem, raw_options)
        thinking = spec.build_prompt(rec, "thinking")
        assert "Do not include any additional text" not in thinking
        assert thinking.rstrip().endswith(answer_instruction(rec.problem_type, rec.options, reasoning=True))
    assert {"SSR", "CRR", "REC", "EPM", "ATR"} <= tasks
    # forward-active records have no options and their own problem types
    forward = [r for r in records if r.extra["ovo_category"] == "forward"]
    assert {r.problem_type for r in forward} == {"SSR", "CRR", "REC"} and not any(r.options for r in forward)
    ssr = next(r for r in forward if r.problem_type == "SSR")
    assert spec.build_prompt(ssr, "direct").endswith(
        "Answer only with “Yes” or “No”.\nDo not include any additional text or explanation in your response.\n"
    )


@pytest.mark.parametrize(
    "response,task,right",
    [
        ("Yes", "SSR", True),
        ("No", "SSR", False),
        ("3", "REC", True),
        ("4", "REC", False),
        ("No", "CRR", True),
    ],
)
def test_ovobench_answers_as_the_official_prompt_asks_are_read(tmp_path, response, task, right):
    spec, records = _records("ovobench", tmp_path)
    rec = next(r for r in records if r.problem_type == task)
    assert spec.score_response(rec, response)["accuracy"] == float(right)


# --- VideoReasonBench ----------------------------------------------------------------------------
def official_vrb_judge_prompt(question, response, ground_truth):
    """utils/video_reasoning_bench.py get_judge_prompt, verbatim."""
    return f"""You will be given a question, a model response and a ground-truth answer. Your task is to determine whether the model response is correct based on the ground-truth answer.

Question:
{question}

Model Response:
{response}

Ground-Truth Answer:
{ground_truth}

NOTE: The model response should contain all information in the ground-truth answer. Directly output "Correct" or "Incorrect":
"""


def official_final_answer(response):
    """utils/video_reasoning_bench.py extract_final_answer (without its Kimi think token)."""
    match = re.search(r"Final Answer\s*(.*?)\s*$", response, re.DOTALL)
    return match.group(1) if match else False


def test_videoreasonbench_prompt_is_the_question_and_reads_the_whole_final_answer(tmp_path):
    spec, records = _records("videoreasonbench", tmp_path)
    for rec in records:
        for style in ("direct", "thinking"):
            prompt = spec.build_prompt(rec, style)
            assert prompt == rec.problem and "<answer>" not in prompt  # one answer format: the question's
            assert prompt.endswith("Provide a summary of the final answer after 'Final Answer:'")
    multi = "<think>lots of counting</think>Step 1 ...\nFinal Answer:\n1st: Queen of Clubs, pile0\n2nd: Ace"
    assert final_answer(multi) == "1st: Queen of Clubs, pile0\n2nd: Ace"
    assert official_final_answer(multi.split("</think>")[1]).lstrip(":").strip() == final_answer(multi)
    assert final_answer("**Final Answer:** 4 chips: 5, 10") == "4 chips: 5, 10"
    assert final_answer("no summary here") is None


def test_videoreasonbench_judge_gets_the_official_prompt(tmp_path):
    spec, records = _records("videoreasonbench", tmp_path)
    calls = load_callable(str(JUDGE.llm_judge)).__globals__["calls"]
    rec = records[0]
    res = spec.score_response(rec, gold_response("videoreasonbench", rec), reward_config=JUDGE)
    assert res["accuracy"] == 1.0 and res["extracted"].count("\n") == 2  # all three lines read
    call = calls[-1]
    assert call["judge_prompt"] == official_vrb_judge_prompt(rec.problem, res["extracted"], call["truth"])
    assert call["judge_reply"] == "correct"
    # officially a response without "Final Answer" is rated 0 without asking the judge
    before = len(calls)
    missing = spec.score_response(rec, "1st: Queen of Clubs, pile0", reward_config=JUDGE)
    assert missing["accuracy"] == 0.0 and missing["final_answer_found"] == 0.0 and len(calls) == before
    # one item wrong out of three: wrong (no partial credit), even though ROUGE would be ~0.9
    one_off = gold_response("videoreasonbench", rec).replace("Ace of Hearts", "Ace of Spades")
    assert spec.score_response(rec, one_off, reward_config=JUDGE)["accuracy"] == 0.0


# --- MINERVA -------------------------------------------------------------------------------------
MINERVA_SYS = (
    "You are an AI assistant responsible for answering questions about a video.\n"
    "Select the best option (A/B/C/D/E) based on the video.\n"
)
MINERVA_POST = "Answer with ONLY the single uppercase letter of the correct option (A/B/C/D/E)."


def official_minerva_prompt(question, choices):
    """vlmeval/dataset/minerva.py Minerva.build_prompt (video_llm): options as "(A) text" lines."""
    opt_str = "\n".join(f"({k}) {v}" for k, v in zip("ABCDE", choices, strict=True))
    return f"{MINERVA_SYS}\nQuestion: {question}\nOptions:\n{opt_str}\n\n{MINERVA_POST}"


def test_minerva_prompt_is_the_official_one_with_five_choices(tmp_path):
    spec, records = _records("minerva", tmp_path)
    rec = records[0]
    choices = [o.split(". ", 1)[1] for o in rec.options]
    assert spec.build_prompt(rec, "direct") == official_minerva_prompt(rec.problem, choices)
    assert "(A, B, C, D, or E)" in spec.build_prompt(rec, "thinking")
    assert spec.score_response(rec, "C")["accuracy"] == 1.0  # the bare letter the prompt asks for
    four = UNSHIPPED["minerva"][0] | {"options": UNSHIPPED["minerva"][0]["options"][:4]}
    bad = parse_record({**four, "problem_id": "m4"}, "minerva.json[0]")
    with pytest.raises(ValueError, match="m4.*4 options.*5"):
        spec.build_prompt(bad, "direct")
