"""The algorithm registries (advantage estimators, policy losses, KL estimators, loss aggregation
modes, filter criteria) and their built-in names. Torch-free.

Adding an algorithm is one decorated function (veRL's ``@register_adv_est`` idea):
``@register_advantage("name", group=True)``. The built-ins are declared here by name, with the
metadata the config checks read (``group``, ``inputs``), and point at their functions in the tensor
modules (``advantages.py``, ``policy_losses.py``, ...), which are imported on the first ``get``. So
checking a config that says ``adv_estimator: grpo`` loads no torch; computing an advantage does.

Names follow :func:`easyvideor1.registry.normalize_name`; an unknown name raises
:class:`UnknownAlgorithmError` listing the closest and all known names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ..registry import (
    PluginFileError,
    Registry,
    UnknownNameError,
    call_with_supported,
    normalize_name,
)
from ..registry import load_plugin_files as _load_plugin_files
from .distill_options import GKDOptions, RLSDOptions
from .loss_options import (
    ClipCovOptions,
    ClipRange,
    DPPOOptions,
    GSPOOptions,
    KLCovOptions,
    PPOOptions,
    SAPOOptions,
)

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "ADVANTAGE_INPUT_KINDS",
    "DISTILL_OBJECTIVES",
    "FILTERS",
    "GREEDY_BASELINE",
    "KL_ESTIMATORS",
    "LOSS_AGGREGATIONS",
    "POLICY_LOSSES",
    "PluginFileError",
    "RAW_REWARD_KEYS",
    "ROLLOUT_IS_WEIGHTS",
    "Registry",
    "UnknownAlgorithmError",
    "advantage_inputs",
    "build_options",
    "call_with_supported",
    "is_group_estimator",
    "load_plugin_files",
    "distill_objective_options",
    "normalize_name",
    "policy_loss_options",
    "register_advantage",
    "register_distill_objective",
    "register_kl_estimator",
    "register_policy_loss",
]


class UnknownAlgorithmError(UnknownNameError):
    """A name that no registered algorithm (estimator, loss, KL type, ...) answers to."""


_HOW = "Register one with the matching @register_* decorator in a file listed in algorithm.plugin_files"

ADVANTAGE_ESTIMATORS: Registry[Callable[..., Any]] = Registry(
    "advantage estimator", error=UnknownAlgorithmError, how_to_add=_HOW
)
POLICY_LOSSES: Registry[Callable[..., Any]] = Registry(
    "policy loss", error=UnknownAlgorithmError, how_to_add=_HOW
)
KL_ESTIMATORS: Registry[Callable[..., Any]] = Registry(
    "KL estimator", error=UnknownAlgorithmError, how_to_add=_HOW
)
# kind spelled as the setting: "unknown loss_agg_mode 'x'" is what users have seen
LOSS_AGGREGATIONS: Registry[Callable[..., Any]] = Registry("loss_agg_mode", error=UnknownAlgorithmError)
FILTERS: Registry[Callable[..., Any]] = Registry("filter criterion", error=UnknownAlgorithmError)
DISTILL_OBJECTIVES: Registry[Callable[..., Any]] = Registry(
    "distillation objective", error=UnknownAlgorithmError, how_to_add=_HOW
)


# Extra inputs an estimator may declare (`register_advantage(..., inputs=...)`); the trainer provides
# each declared one and nothing else, so it needs no estimator-specific branches.
GREEDY_BASELINE = "greedy_baseline"  # `baseline_scores` [B]: the score of one greedy response per prompt
RAW_REWARD_KEYS = "raw_reward_keys"  # `scores` is {key: [B]} of the unshaped reward keys it names
ADVANTAGE_INPUT_KINDS = (GREEDY_BASELINE, RAW_REWARD_KEYS)


def _advantage_metadata(name: str, inputs: Sequence[str], group: bool) -> dict[str, Any]:
    unknown = [i for i in inputs if i not in ADVANTAGE_INPUT_KINDS]
    if unknown:
        raise ValueError(
            f"advantage estimator {name!r}: unknown input(s) {unknown}; known: {ADVANTAGE_INPUT_KINDS}"
        )
    return {"inputs": frozenset(inputs), "group": bool(group)}


def register_advantage(
    name: str,
    *,
    aliases: Sequence[str] = (),
    override: bool = False,
    inputs: Sequence[str] = (),
    group: bool = False,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: register an advantage estimator as `name` (signature: see `advantages.py`).

    `inputs` declares what it needs beyond the shaped scores: `GREEDY_BASELINE` (the trainer
    generates one greedy response per prompt and passes its score as `baseline_scores`) and/or
    `RAW_REWARD_KEYS` (`scores` becomes `{key: [B]}` of the raw reward keys in
    `algorithm.gdpo_reward_keys`; reward shaping is then refused at config time). `group=True` says
    its baseline is the other responses of the prompt's group, so the config refuses `rollout.n < 2`.
    """
    metadata = _advantage_metadata(name, inputs, group)
    return ADVANTAGE_ESTIMATORS.register(name, aliases=aliases, override=override, **metadata)


# The parameter by which a policy loss takes the rollout-correction weights and applies them itself
# (`policy_losses.compute_policy_loss`); it is never a user option.
ROLLOUT_IS_WEIGHTS = "rollout_is_weights"
_LOSS_INPUTS = frozenset({ROLLOUT_IS_WEIGHTS})


def register_policy_loss(
    name: str, *, aliases: Sequence[str] = (), override: bool = False, options: type | None = None
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: register a policy loss under `name` (see `policy_losses.py` for the signature).

    `options` is the dataclass of the loss's own settings (its fields: the keyword options the
    loss takes, with defaults; its `__post_init__` checks them), set by the user under
    `algorithm.loss_options`. Without one, the loss's keyword-only parameters with defaults are
    its options (`def my_loss(..., *, my_beta: float = 1.0)` makes `algorithm.loss_options.my_beta`).
    A loss with a `rollout_is_weights` parameter receives the rollout-correction weights `[B, T]`
    (or None) and applies them itself; any other loss's per-token loss is multiplied by them.
    """

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        declared = options if options is not None else _options_of(name, fn, skip=_LOSS_INPUTS)
        return POLICY_LOSSES.register(name, aliases=aliases, override=override, options=declared)(fn)

    return register


def _options_of(name: str, fn: Callable[..., Any], skip: frozenset[str] = frozenset()) -> type:
    """A dataclass of `fn`'s keyword-only parameters with defaults (a plug-in's options), less
    those in `skip`."""
    import dataclasses
    import inspect

    params = inspect.signature(fn).parameters.values()
    fields = [
        (p.name, Any, dataclasses.field(default=p.default))
        for p in params
        if p.kind is p.KEYWORD_ONLY and p.default is not p.empty and p.name not in skip
    ]
    return dataclasses.make_dataclass(f"{name}_options", fields)


def policy_loss_options(name: str) -> type:
    """The options dataclass policy loss `name` declared (one registered without the decorator:
    its keyword-only defaults); raises `UnknownAlgorithmError`."""
    options = POLICY_LOSSES.metadata(name).get("options")
    return options if options is not None else _options_of(name, POLICY_LOSSES.get(name), skip=_LOSS_INPUTS)


def register_distill_objective(
    name: str,
    *,
    aliases: Sequence[str] = (),
    override: bool = False,
    options: type | None = None,
    kind: str = "advantage",
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: register a distillation objective under `name` (`algorithms/distill.py`: a
    function of `DistillInputs`, `reward_weight=`, `coef=` and its options, returning
    `DistillOutput`), or with `kind="loss"` a per-token loss of the student's and the teacher's
    log-probs of the teacher's top-k ids (`gkd`'s signature; its options then declare `top_k`).
    `options` is the dataclass of its own settings (`algorithm.distill.options`); without one, its
    keyword-only parameters with defaults are."""
    if kind not in DISTILL_KINDS:
        raise ValueError(
            f"distillation objective {name!r}: kind must be one of {DISTILL_KINDS}, got {kind!r}"
        )

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        declared = options if options is not None else _options_of(name, fn, skip=_DISTILL_WEIGHTS)
        return DISTILL_OBJECTIVES.register(
            name, aliases=aliases, override=override, options=declared, kind=kind
        )(fn)

    return register


DISTILL_KINDS = ("advantage", "loss")  # what an objective makes: advantages, or a loss term
_DISTILL_WEIGHTS = frozenset({"reward_weight", "coef"})  # the section's own keys, not options


def distill_objective_options(name: str) -> type | None:
    """The options dataclass of distillation objective `name` (None: it takes none)."""
    return DISTILL_OBJECTIVES.metadata(name).get("options")


def build_options(
    names: Iterable[str], options_of: Callable[[str], type | None], given: dict[str, Any], selected: str
) -> tuple[Any, list[str]]:
    """Each registered entry's options dataclass built from the keys of ``given`` it declares (so a
    bad value is refused whichever entry is selected, as a typo is): the ``selected`` entry's
    options (None if it declares none) and the given keys no entry declares, sorted."""
    import dataclasses

    declared: set[str] = set()
    chosen = None
    for name in names:
        options = options_of(name)
        if options is None:
            continue
        keys = {f.name for f in dataclasses.fields(options)}
        declared |= keys
        built = options(**{k: v for k, v in given.items() if k in keys})
        if name == selected:
            chosen = built
    return chosen, sorted(set(given) - declared)


def register_kl_estimator(
    name: str, *, aliases: Sequence[str] = (), override: bool = False
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: register `fn(log_prob, ref_log_prob) -> per-token KL` under `name`."""
    return KL_ESTIMATORS.register(name, aliases=aliases, override=override)


def is_group_estimator(name: str) -> bool:
    """Whether estimator `name` compares the responses of one prompt's group (then one response per
    prompt gets advantage 0); raises `UnknownAlgorithmError` for an unknown name."""
    return bool(ADVANTAGE_ESTIMATORS.metadata(name).get("group", False))


def advantage_inputs(name: str) -> frozenset[str]:
    """The extra inputs estimator `name` declared (empty for the shaped-score-only ones)."""
    return frozenset(ADVANTAGE_ESTIMATORS.metadata(name).get("inputs", frozenset()))


def load_plugin_files(paths: Iterable[str], key: str = "algorithm.plugin_files") -> None:
    """Import user files whose `@register_advantage` / `@register_policy_loss` /
    `@register_kl_estimator` decorators add algorithms (idempotent: each file is imported once).

    A missing file, or one that fails to import, raises `PluginFileError` naming ``key`` and the file.
    """
    _load_plugin_files(paths, key=key)


# ------------------------------------------------------------------------------------ built-ins
# Declared by name so that config checks know them without importing torch; each function lives in
# its tensor module and is imported on the first `get`.

_ADV = "easyvideor1.algorithms.advantages"
ADVANTAGE_ESTIMATORS.declare("grpo", f"{_ADV}:grpo", group=True, inputs=frozenset())
ADVANTAGE_ESTIMATORS.declare("dr_grpo", f"{_ADV}:dr_grpo", group=True, inputs=frozenset())
ADVANTAGE_ESTIMATORS.declare("rloo", f"{_ADV}:rloo", group=True, inputs=frozenset())
ADVANTAGE_ESTIMATORS.declare(
    "reinforce_plus_plus", f"{_ADV}:reinforce_plus_plus", aliases=("reinforce++",), inputs=frozenset()
)
ADVANTAGE_ESTIMATORS.declare("remax", f"{_ADV}:remax", inputs=frozenset({GREEDY_BASELINE}))
ADVANTAGE_ESTIMATORS.declare("gdpo", f"{_ADV}:gdpo", group=True, inputs=frozenset({RAW_REWARD_KEYS}))
ADVANTAGE_ESTIMATORS.declare(
    "reinforce_plus_plus_baseline",
    f"{_ADV}:reinforce_plus_plus_baseline",
    aliases=("reinforce++_baseline",),
    group=True,
    inputs=frozenset(),
)
ADVANTAGE_ESTIMATORS.declare("grpo_passk", f"{_ADV}:grpo_passk", group=True, inputs=frozenset())
ADVANTAGE_ESTIMATORS.declare("opo", f"{_ADV}:opo", group=True, inputs=frozenset())
ADVANTAGE_ESTIMATORS.declare("gpg", f"{_ADV}:gpg", group=True, inputs=frozenset())

_LOSS = "easyvideor1.algorithms.policy_losses"
POLICY_LOSSES.declare("ppo", f"{_LOSS}:ppo", aliases=("vanilla", "default"), options=PPOOptions)
POLICY_LOSSES.declare("gspo", f"{_LOSS}:gspo", options=GSPOOptions)
POLICY_LOSSES.declare("gspo_token", f"{_LOSS}:gspo_token", options=GSPOOptions)
POLICY_LOSSES.declare("cispo", f"{_LOSS}:cispo", options=ClipRange)
POLICY_LOSSES.declare("sapo", f"{_LOSS}:sapo", options=SAPOOptions)
POLICY_LOSSES.declare("geo_mean", f"{_LOSS}:geo_mean", aliases=("gmpo",), options=ClipRange)
POLICY_LOSSES.declare("clip_cov", f"{_LOSS}:clip_cov", options=ClipCovOptions)
POLICY_LOSSES.declare("kl_cov", f"{_LOSS}:kl_cov", options=KLCovOptions)
POLICY_LOSSES.declare("dppo", f"{_LOSS}:dppo", options=DPPOOptions)

_KL = "easyvideor1.algorithms.kl"
KL_ESTIMATORS.declare("none", f"{_KL}:_none")
KL_ESTIMATORS.declare("k1", f"{_KL}:_k1", aliases=("kl",))
KL_ESTIMATORS.declare("abs", f"{_KL}:_abs")
KL_ESTIMATORS.declare("k2", f"{_KL}:_k2", aliases=("mse",))
KL_ESTIMATORS.declare("k3", f"{_KL}:_k3", aliases=("low_var_kl",))

_AGG = "easyvideor1.algorithms.aggregation"
LOSS_AGGREGATIONS.declare("token-mean", f"{_AGG}:_token_mean")
LOSS_AGGREGATIONS.declare("token-sum", f"{_AGG}:_token_sum")
LOSS_AGGREGATIONS.declare("seq-mean-token-mean", f"{_AGG}:_seq_mean_token_mean")
LOSS_AGGREGATIONS.declare("seq-mean-token-sum", f"{_AGG}:_seq_mean_token_sum")
LOSS_AGGREGATIONS.declare("seq-mean-token-sum-norm", f"{_AGG}:_seq_mean_token_sum_norm")

_DISTILL = "easyvideor1.algorithms.distill"
DISTILL_OBJECTIVES.declare("opd", f"{_DISTILL}:opd", options=None, kind="advantage")
DISTILL_OBJECTIVES.declare("rlsd", f"{_DISTILL}:rlsd", options=RLSDOptions, kind="advantage")
DISTILL_OBJECTIVES.declare("gkd", f"{_DISTILL}:gkd", options=GKDOptions, kind="loss")

_FILTER = "easyvideor1.algorithms.filtering"
# "std" needs at least two responses per group: a group of one never has reward spread
FILTERS.declare("std", f"{_FILTER}:_keep_varied", group=True)
FILTERS.declare("mean", f"{_FILTER}:_keep_mean_inside")
