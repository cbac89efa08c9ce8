"""Typed configuration of the reward library.

Every field is documented in the style of TRL's config classes: what it does, its unit and its
default, and why the default was chosen. The classes are plain dataclasses so that they can be used
as OmegaConf structured configs, pickled to worker processes and built directly in tests.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import ConfigError
from ..validation import non_negative, positive
from .judge import JudgeConfig

BOX_FORMATS = ("pixel", "normalized", "grid1000")


@dataclass
class TaskWeights:
    """Weights of the two reward components for one task type.

    Parameters:
        accuracy (`float`):
            Weight of the task accuracy in `overall`.
        format (`float`):
            Weight of the format score in `overall`.
    """

    accuracy: float = 0.9
    format: float = 0.1


@dataclass
class SandboxConfig:
    """Limits of the sandbox that executes model-written Python code (see `rewards/sandbox.py`).

    Parameters:
        wall_time_s (`float`, *optional*, defaults to `4.0`):
            Wall-clock limit of one execution (one test-case run) in seconds. On expiry the whole
            process group, and when running as root every process of the sandbox user, is killed.
        cpu_time_s (`int`, *optional*, defaults to `4`):
            CPU-time limit (`RLIMIT_CPU`) in seconds; the kernel sends SIGXCPU then SIGKILL.
        memory_mb (`int`, *optional*, defaults to `512`):
            Address-space limit (`RLIMIT_AS`) per process, in MiB. It is per process, not per
            sandbox: the total is bounded by `memory_mb * max_processes`.
        file_size_mb (`int`, *optional*, defaults to `8`):
            Largest file the program may write (`RLIMIT_FSIZE`), in MiB. It also bounds the captured
            stdout and stderr, which are written to files.
        max_processes (`int`, *optional*, defaults to `16`):
            Process and thread limit (`RLIMIT_NPROC`). It only contains a fork bomb when the
            program runs under its own user id (as root the sandbox switches to a fresh uid, since
            the kernel does not apply `RLIMIT_NPROC` to root).
        max_output_kb (`int`, *optional*, defaults to `256`):
            How much of stdout and stderr is read back, in KiB.
        max_tests (`int`, *optional*, defaults to `32`):
            At most this many test cases of one record are executed (the first ones).
        time_budget_s (`float`, *optional*, defaults to `15.0`):
            Wall-clock budget, in seconds, for all test executions of one response together
            (interpreter starts included). Without it a response whose tests each run just under
            `wall_time_s` would take `max_tests * wall_time_s` (~2 minutes with the defaults) and
            stall a whole training step. Once it is spent the remaining tests are not run and count
            as failed; the score's details then carry `time_budget_exhausted = 1` and
            `tests_not_run`. 15 s leaves an honest solution ~0.4 s per test at 32 tests, far more
            than the ~0.03 s an execution takes here, while bounding the worst case to ~4 timeouts.
        allow_site_packages (`bool`, *optional*, defaults to `False`):
            Let the program import third-party packages (numpy, ...) of the sandbox interpreter.
            Off by default: the standard library is enough for most test-case benchmarks and the
            interpreter starts about 3x faster without `site`.
        python_executable (`str` or `None`, *optional*, defaults to `None`):
            Interpreter used inside the sandbox. `None` picks the first of the current interpreter,
            `python3` on `PATH` and `/usr/bin/python3` that the unprivileged sandbox user can run
            (an interpreter installed under /root is not, so as root this is often the system one,
            whose site-packages then apply with `allow_site_packages`).
    """

    wall_time_s: float = 4.0
    cpu_time_s: int = 4
    memory_mb: int = 512
    file_size_mb: int = 8
    max_processes: int = 16
    max_output_kb: int = 256
    max_tests: int = 32
    time_budget_s: float = 15.0
    allow_site_packages: bool = False
    python_executable: str | None = None

    def __post_init__(self) -> None:
        for name in ("wall_time_s", "cpu_time_s", "memory_mb", "max_tests", "time_budget_s"):
            value = getattr(self, name)
            if not value > 0:
                raise ConfigError(f"reward.sandbox.{name} must be > 0, got {value!r}")


@dataclass
class ToolRewardConfig:
    """Shaping of an episode's reward by its tool use (with ``tools.names``; all off by default).

    Added to the episode's ``overall`` after the task scored its final answer:
    ``+ valid_call`` once if it made at least one valid call, ``- invalid_call`` per invalid call or
    tool error, and ``- over_budget`` per call past ``max_calls``.

    Parameters:
        valid_call (`float`, *optional*, defaults to `0.0`):
            Bonus for an episode with at least one valid call (a nudge towards looking again; keep it
            below the accuracy weight, or calling pays more than answering right).
        invalid_call (`float`, *optional*, defaults to `0.0`):
            Penalty per invalid call (malformed, unknown tool, bad arguments, over a budget) or tool error.
        max_calls (`int`, *optional*, defaults to `0`):
            The call budget of an episode for ``over_budget``; 0: none.
        over_budget (`float`, *optional*, defaults to `0.0`):
            Penalty per call past ``max_calls``.
    """

    valid_call: float = 0.0
    invalid_call: float = 0.0
    max_calls: int = 0
    over_budget: float = 0.0

    def __post_init__(self) -> None:
        for name in ("valid_call", "invalid_call", "max_calls", "over_budget"):
            value = getattr(self, name)
            if not value >= 0:
                raise ConfigError(f"reward.tools.{name} must be >= 0, got {value!r}")

    def shaping(self, counts: dict[str, int]) -> float:
        """The amount added to an episode's ``overall`` for its ``calls``, ``invalid_calls``,
        ``errors`` (``EpisodeTools.counts``)."""
        valid = counts["calls"] - counts["invalid_calls"] - counts["errors"]
        extra = max(counts["calls"] - self.max_calls, 0) if self.max_calls else 0
        return (
            self.valid_call * (valid > 0)
            - self.invalid_call * (counts["invalid_calls"] + counts["errors"])
            - self.over_budget * extra
        )


@dataclass
class RewardConfig:
    """Configuration of the task-aware reward (`easyvideor1.rewards.compute_score`).

    `overall = accuracy_weight * accuracy + format_weight * format`.

    Parameters:
        accuracy_weight (`float`, *optional*, defaults to `0.9`):
            Weight of the task accuracy in `overall` (the published EasyVideoR1 default).
        format_weight (`float`, *optional*, defaults to `0.1`):
            Weight of the format score in `overall`. The format score is 1 for exactly one
            non-empty `<answer>...</answer>` whose content has the task's shape (a letter, a number,
            the expected JSON, ...), 0.5 when the tag is there but malformed, 0 without a tag.
        task_weights (`dict[str, TaskWeights]`, *optional*, defaults to `{}`):
            Per-task overrides of the two weights, keyed by any task name or alias, e.g.
            `{"temporal grounding": {"accuracy": 0.8, "format": 0.2}}`.
        require_think (`bool`, *optional*, defaults to `False`):
            Give format 0 unless a non-empty `<think>...</think>` block (or, for chat templates that
            open the block in the prompt, a non-empty text closed by `</think>`) precedes the answer.
        overlong_buffer, overlong_max_length, overlong_penalty_factor:
            Removed: the one DAPO overlong penalty is the training step's reward shaping,
            `algorithm.overlong` (`buffer`, `max_length`, `factor`); setting one of these raises,
            so the penalty cannot be applied twice.
        numeric_rel_tol (`float`, *optional*, defaults to `0.005`):
            Relative tolerance of numerical answers: correct if `|pred - gt| <= max(abs_tol,
            rel_tol * |gt|)`. 0.5 % accepts answers rounded to three significant digits and rejects
            off-by-one counts from 2 to 199.
        numeric_abs_tol (`float`, *optional*, defaults to `1e-6`):
            Absolute tolerance of numerical answers, used when the ground truth is (close to) zero.
        default_box_format (`str`, *optional*, defaults to `"pixel"`):
            Box coordinate convention when a record does not declare `box_format`: `"pixel"`
            (absolute pixels of the source frame, the convention of the published datasets),
            `"normalized"` (0-1) or `"grid1000"` (Qwen3-VL's 0-1000 grid). A record may also set
            `gt_box_format` when its ground truth uses another convention than the model, plus
            `width`/`height` (source frame size) which pixel conversions and clipping need.
        math_timeout_s (`float`, *optional*, defaults to `5.0`):
            Hard time limit of one math-verify equivalence check. It runs in a helper process that is
            killed on expiry, so the limit also holds off the main thread (math-verify's own
            `signal.alarm` timeout does not).
        reward_function (`str` or `None`, *optional*, defaults to `None`):
            EasyR1 convention `"path/to/file.py:function"`: a custom reward function that replaces the
            built-in dispatcher. It receives one reward-input dict (`response`, `ground_truth`,
            `problem_type`, `options`, and every other record field), or a list of them when the file
            sets `REWARD_TYPE = "batch"`, and must return a dict (list of dicts) with `overall`.
        reward_function_kwargs (`dict`, *optional*, defaults to `{}`):
            Keyword arguments bound to `reward_function`.
        task_files (`list[str]`, *optional*, defaults to `[]`):
            Python files imported before scoring so that their `@register_task` functions add or
            override task types without editing the package.
        llm_judge (`str` or `None`, *optional*, defaults to `None`):
            Off by default. `"file.py:function"` called as `fn(prediction, ground_truth, **record)`
            returning a score in [0, 1]; when set it replaces ROUGE as the open-ended accuracy.
        judge (`JudgeConfig`):
            A judge or generative reward model behind an OpenAI-compatible endpoint
            (``reward.judge.*``, ``rewards/judge.py``; off while ``reward.judge.url`` is empty).
        strict (`bool`, *optional*, defaults to `False`):
            Re-raise exceptions raised inside a task instead of recording them (the result then has
            an `error` key and the error counters grow). Useful while developing a task.
        sandbox (`SandboxConfig`):
            Limits of the code-execution sandbox.
        tools (`ToolRewardConfig`):
            Shaping of an episode's reward by its tool use (``reward.tools.*``; off by default).
    """

    accuracy_weight: float = 0.9
    format_weight: float = 0.1
    task_weights: dict[str, TaskWeights] = field(default_factory=dict)
    require_think: bool = False
    overlong_buffer: int | None = None  # removed (see above): must stay unset
    overlong_max_length: int | None = None
    overlong_penalty_factor: float | None = None
    numeric_rel_tol: float = 0.005
    numeric_abs_tol: float = 1e-6
    default_box_format: str = "pixel"
    math_timeout_s: float = 5.0
    reward_function: str | None = None
    reward_function_kwargs: dict = field(default_factory=dict)
    task_files: list[str] = field(default_factory=list)
    llm_judge: str | None = None
    judge: JudgeConfig = field(default_factory=JudgeConfig)
    strict: bool = False
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    tools: ToolRewardConfig = field(default_factory=ToolRewardConfig)

    def __post_init__(self) -> None:
        # OmegaConf may hand us plain dicts for nested dataclasses: normalise them here.
        if isinstance(self.sandbox, dict):
            self.sandbox = SandboxConfig(**self.sandbox)
        if isinstance(self.tools, dict):
            self.tools = ToolRewardConfig(**self.tools)
        if isinstance(self.judge, dict):
            self.judge = JudgeConfig(**self.judge)
        if self.llm_judge and self.judge.enabled:
            raise ConfigError(
                "reward.llm_judge and reward.judge.url are both set: use one judge (the endpoint, or the callable)"
            )
        self.task_weights = {
            name: weights if isinstance(weights, TaskWeights) else TaskWeights(**dict(weights))
            for name, weights in dict(self.task_weights).items()
        }
        for name in ("accuracy_weight", "format_weight", "numeric_rel_tol", "numeric_abs_tol"):
            non_negative(f"reward.{name}", getattr(self, name))
        positive("reward.math_timeout_s", self.math_timeout_s)
        if self.default_box_format not in BOX_FORMATS:
            raise ConfigError(
                f"default_box_format must be one of {BOX_FORMATS}, got {self.default_box_format!r}"
            )
        for name in ("overlong_buffer", "overlong_max_length", "overlong_penalty_factor"):
            if getattr(self, name) is not None:
                raise ConfigError(
                    f"reward.{name} was removed: the overlong penalty is reward shaping in the training "
                    "step, algorithm.overlong (enable, buffer, max_length, factor), applied once"
                )
