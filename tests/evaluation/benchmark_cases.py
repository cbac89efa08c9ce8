"""Test material for the benchmark checks: gold and wrong responses as a model would write them, and
records in the documented unified format for the benchmarks whose files are not in ../shared
(shaped like the public releases: OVO-Bench forward tasks carry problem_type SSR/CRR/REC and no
options, LiveSports' ocr_livesports is 0/1, MINERVA has five options, ...)."""

from __future__ import annotations

import json
import random
from pathlib import Path

from easyvideor1.data.synthetic import random_scene, scene_records
from easyvideor1.rewards import RewardConfig, resolve_task
from easyvideor1.rewards.parsing import parse_ground_truth

JUDGE = RewardConfig(llm_judge=f"{Path(__file__).with_name('judge_stub.py')}:judge")
WRONG_TEXT = "zebra quantum harmonica"


def truth(rec) -> str:
    return parse_ground_truth(rec.answer).strip()


def gold_response(name: str, rec) -> str:
    """The gold answer in the form the benchmark's prompt asks for."""
    if name == "videoreasonbench":  # the question asks for a summary after 'Final Answer:'
        return f"The first card added is ...\nFinal Answer:\n{truth(rec)}"
    return f"<answer>{truth(rec)}</answer>"


def _far(values: list[float]) -> list[float]:
    return [v + 5000 for v in values]


def wrong_answer(rec) -> str:
    """An answer of the right shape that is wrong (scores exactly 0)."""
    inner = truth(rec)
    task = resolve_task(rec.problem_type).name
    if rec.options:
        letters = [o.strip().lstrip("(")[0] for o in rec.options]
        return next((x for x in letters if x != inner), chr(ord(inner[0]) + 1))
    if task == "boolean":
        return "No" if inner.lower() in ("yes", "1", "true") else "Yes"
    if inner.startswith("{"):
        gt = json.loads(inner)
        if "time" in gt:
            gt["time"] = [gt["time"][0] + 1000, gt["time"][1] + 1001]
        if isinstance(gt.get("boxes"), dict):
            gt["boxes"] = {k: _far(v) for k, v in gt["boxes"].items()}
        elif isinstance(gt.get("boxes"), list):
            gt["boxes"] = _far(gt["boxes"])
        return json.dumps(gt)
    if inner.startswith("["):
        return json.dumps(_far(json.loads(inner)))
    try:
        return f"{float(inner) * 3 + 7:g}"
    except ValueError:
        return WRONG_TEXT


def wrong_response(name: str, rec) -> str:
    if name == "videoreasonbench":
        return f"Let me count.\nFinal Answer: {WRONG_TEXT}"
    return f"<answer>{wrong_answer(rec)}</answer>"


# ----------------------------------------------------------------------------------- unshipped files
_MC = {"problem_type": "multiple choice", "data_type": "video"}
_VRB_Q = (
    "The video showcases a sequence of operations involving one or more piles of cards. ...\n"
    "Please carefully watch the video and answer the following question:\n\n{}\n\n"
    "Provide a summary of the final answer after 'Final Answer:'"
)
UNSHIPPED: dict[str, list[dict]] = {
    "ovobench": [
        {
            **_MC,
            "problem": "Who did I communicate to  when chopping egg plants?",
            "options": [
                "A: a person with brown shirt",
                "B: a person with green shirt",
                "C: blue",
                "D: white",
            ],
            "path": "0.mp4",
            "solution": "<answer>C</answer>",
            "problem_id": "ovo_0",
            "ovo_task": "EPM",
            "ovo_category": "backward",
            "ovo_id": 0,
        },
        {
            **_MC,
            "problem": "What is the color of the dog?",
            "options": ["A: White.", "B: Black.", "C: Pink.", "D: Brown."],
            "path": "993.mp4",
            "solution": "<answer>B</answer>",
            "problem_id": "ovo_993",
            "ovo_task": "ATR",
            "ovo_category": "realtime",
            "ovo_id": 993,
        },
        {
            "data_type": "video",
            "problem_type": "CRR",
            "problem": "The woman in a black coat walks towards the black car, what does she do to the car?",
            "options": [],
            "path": "1468_0.mp4",
            "solution": "<answer>No</answer>",
            "problem_id": "ovo_1468_0",
            "ovo_task": "CRR",
            "ovo_category": "forward",
            "ovo_id": 1468,
            "ovo_test_idx": 0,
            "ovo_type": 0,
        },
        {
            "data_type": "video",
            "problem_type": "SSR",
            "problem": "pull up the hair to reserve place for the hair extensions",
            "options": [],
            "path": "1516_0.mp4",
            "solution": "<answer>Yes</answer>",
            "problem_id": "ovo_1516_0",
            "ovo_task": "SSR",
            "ovo_category": "forward",
            "ovo_id": 1516,
            "ovo_test_idx": 0,
            "ovo_type": 1,
        },
        {
            "data_type": "video",
            "problem_type": "REC",
            "problem": "How many times did they breaking something?",
            "options": [],
            "path": "1558_0.mp4",
            "solution": "<answer>3</answer>",
            "problem_id": "ovo_1558_0",
            "ovo_task": "REC",
            "ovo_category": "forward",
            "ovo_id": 1558,
            "ovo_test_idx": 0,
        },
    ],
    "odvbench": [
        {
            **_MC,
            "problem": "Which way does the ego car turn?",
            "options": ["A. left", "B. right", "C. up", "D. down"],
            "solution": "<answer>D</answer>",
            "odv_task": "direction",
            "odv_subtask": "ego",
            "path": "12_drive_s3_e9.mp4",
        },
    ],
    "livesports3k_qa": [
        {
            **_MC,
            "problem": "Who scores the basket?",
            "options": ["A: #10", "B: #23", "C: #7", "D: #30"],
            "path": "I0rOeSG6_Y4_300.745_350.676.mp4",
            "problem_id": "I0rOeSG6_Y4_e10_q1",
            "solution": "<answer>B</answer>",
            "q_type_livesports": "Who",
            "ocr_livesports": 1,
        },
        {
            **_MC,
            "problem": "When is the bow explained?",
            "options": ["A: 1st quarter", "B: 2nd quarter", "C: 3rd quarter", "D: 4th quarter"],
            "path": "I0rOeSG6_Y4_300.745_350.676.mp4",
            "problem_id": "I0rOeSG6_Y4_e10_q2",
            "solution": "<answer>A</answer>",
            "q_type_livesports": "When",
            "ocr_livesports": 0,
        },
    ],
    "minerva": [
        {
            **_MC,
            "data_source": "Minderva",
            "path": "--C26cvIFdY.mp4",
            "problem": "What sequence of events occur to put Hawaii up 24 to 13 against UC Irvine?",
            "problem_id": 0,
            "options": [f"{c}. #{i} in white makes a shot." for i, c in enumerate("ABCDE")],
            "solution": "<answer>C</answer>",
        },
    ],
    "vcrbench": [
        {
            **_MC,
            "problem": "Why didn't the man go to rescue the trapped woman?",
            "options": ["A. Hostile.", "B. Another woman.", "C. Another man did.", "D. Another explosion."],
            "solution": "<answer>D</answer>",
        },
        {
            "problem_type": "open-ended",
            "data_type": "video",
            "problem": "In which room does the second fight in the video take place?",
            "options": [],
            "solution": "<answer>Kitchen</answer>",
        },
        {
            "problem_type": "open-ended",
            "data_type": "video",
            "problem": "Please locate the object 'the purple cup' at 2.3s as [x1, y1, x2, y2].",
            "options": [],
            "solution": "<answer>[563, 352, 580, 401]</answer>",
        },
    ],
    "videoreasonbench": [
        {
            "problem_type": "open-ended",
            "data_type": "video",
            "path": "card/state1_op5_start.mp4",
            "problem": _VRB_Q.format("What are the 1st to 3rd cards being added to any pile?"),
            "options": [],
            "solution": "<answer>1st: Queen of Clubs, pile0\n2nd: Ace of Hearts, pile0\n3rd: Jack of Diamonds, "
            "pile0</answer>",
        },
        {
            "problem_type": "open-ended",
            "data_type": "video",
            "path": "chip/state2_op4_end.mp4",
            "problem": _VRB_Q.format("How many chips would be in `cup0`?"),
            "options": [],
            "solution": "<answer>4 chips: 100, 10, 50, 100</answer>",
        },
        {  # operation prediction: no ground truth in the unified file
            "problem_type": "open-ended",
            "data_type": "video",
            "path": "cup/state1_op3_end.mp4",
            "problem": _VRB_Q.format(
                "What sequence of cup swaps achieves the desired distribution: `b1, c1`?"
            ),
            "options": [],
            "solution": "<answer>None</answer>",
        },
    ],
    "tempcompass": [
        {
            **_MC,
            "options": ["A. faster", "B. slower"],
            "solution": "<answer>A</answer>",
            "original_question_type": "speed",
        },
        {
            **_MC,
            "options": ["A. clockwise", "B. anticlockwise", "C. not rotating"],
            "solution": "<answer>C</answer>",
            "original_question_type": "direction",
        },
    ],
}


def write_unshipped(name: str, annotation: str, directory: Path) -> Path:
    """Write ``name``'s records in its unified format under ``directory``; returns the file."""
    if name == "synthetic":  # `easyvideor1 synth` records (scenes only; no video is needed to score)
        rng = random.Random(3)
        rows = []
        for i in range(4):
            scene = random_scene(rng, 160, 120, 10.0, 4.0)
            rows += scene_records(scene, f"videos/synth_{i}.mp4", f"synth_{i}")
        path = directory / annotation
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return path
    rows = [
        {
            "problem_id": f"{name}-{i}",
            "problem": "What happens in the video?",
            "path": f"v{i}.mp4",
            "data_source": name,
            **r,
        }
        for i, r in enumerate(UNSHIPPED[name])
    ]
    path = directory / annotation
    path.write_text(json.dumps(rows))
    return path
