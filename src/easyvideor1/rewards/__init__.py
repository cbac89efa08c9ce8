"""Task-aware verifiable rewards for video LLMs: one implementation for training and evaluation.

    from easyvideor1.rewards import compute_score
    compute_score("<think>...</think><answer>B</answer>", "<answer>B</answer>", "multiple choice",
                  options=["A. red", "B. green"])
    # {'overall': 1.0, 'accuracy': 1.0, 'format': 1.0, 'task': 'multiple_choice', 'prediction': 'B'}

Tasks live in `rewards/tasks/` (one module, one `@register_task` function each); the trainer calls
`validate_problem_types` on its datasets at start-up so unknown types fail early. Each task declares
its answer instruction; `answer_instruction(problem_type, options)` is what prompts append.
"""

from easyvideor1.rewards.batch import compute_scores, prefetch_judgements, score_records, shutdown_pool
from easyvideor1.rewards.config import RewardConfig, SandboxConfig, TaskWeights
from easyvideor1.rewards.instructions import answer_instruction
from easyvideor1.rewards.numbers import ParsedNumber, parse_number
from easyvideor1.rewards.parsing import ExtractedAnswer, extract_answer
from easyvideor1.rewards.registry import (
    UnknownTaskError,
    register_task,
    registered_tasks,
    resolve_task,
    validate_problem_types,
)
from easyvideor1.rewards.sample import GroundTruthError, Sample, TaskScore
from easyvideor1.rewards.scoring import compute_score, error_counts, reset_error_counts, score_record
from easyvideor1.rewards.tasks.multiple_choice import ChoiceExtraction, extract_choice

__all__ = [
    "ChoiceExtraction",
    "ExtractedAnswer",
    "GroundTruthError",
    "ParsedNumber",
    "RewardConfig",
    "Sample",
    "SandboxConfig",
    "TaskScore",
    "TaskWeights",
    "UnknownTaskError",
    "answer_instruction",
    "compute_score",
    "compute_scores",
    "error_counts",
    "extract_answer",
    "extract_choice",
    "parse_number",
    "register_task",
    "registered_tasks",
    "reset_error_counts",
    "score_record",
    "score_records",
    "prefetch_judgements",
    "resolve_task",
    "shutdown_pool",
    "validate_problem_types",
]
