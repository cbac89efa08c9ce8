"""algorithm.plugin_files: user estimators, losses and KL estimators loaded from files and selected
by name; estimators declare the extra inputs they need."""

from __future__ import annotations

import pytest
import torch

from easyvideor1.algorithms import GREEDY_BASELINE, RAW_REWARD_KEYS, advantage_inputs, register_advantage
from easyvideor1.config import ConfigError, RunConfig, load_config

PLUGIN = """
import torch
from easyvideor1.algorithms import AdvantageOutput, register_advantage, register_kl_estimator
from easyvideor1.algorithms.advantages import GREEDY_BASELINE


@register_advantage("plugin_baseline_{tag}", inputs=(GREEDY_BASELINE,))
def plugin_baseline(scores, response_mask, group_ids, *, baseline_scores):
    adv = (scores - baseline_scores).unsqueeze(-1) * response_mask
    return AdvantageOutput(adv, adv)


@register_kl_estimator("plugin_sq_{tag}")
def plugin_sq(log_prob, ref_log_prob):
    return (log_prob - ref_log_prob) ** 2
"""


def test_built_in_estimators_declare_their_inputs() -> None:
    assert advantage_inputs("remax") == {GREEDY_BASELINE}
    assert advantage_inputs("GDPO") == {RAW_REWARD_KEYS}
    assert advantage_inputs("grpo") == advantage_inputs("dr-grpo") == frozenset()
    with pytest.raises(ValueError, match="unknown input"):
        register_advantage("bad_inputs", inputs=("the_weather",))


def test_plugin_files_are_imported_before_the_names_are_checked(tmp_path) -> None:
    path = tmp_path / "my_algorithms.py"
    path.write_text(PLUGIN.replace("{tag}", "a"))
    cfg = load_config(
        RunConfig,
        None,
        [
            f"algorithm.plugin_files=[{path}]",
            "algorithm.adv_estimator=plugin_baseline_a",
            "algorithm.kl.type=plugin_sq_a",  # the kl section is built before the algorithm section
        ],
    )
    assert cfg.algorithm.adv_estimator == "plugin_baseline_a"
    assert advantage_inputs("plugin_baseline_a") == {GREEDY_BASELINE}
    # with a greedy baseline the reward must stay unshaped: refused like ReMax
    with pytest.raises(ConfigError, match="overlong"):
        load_config(
            RunConfig,
            None,
            [
                f"algorithm.plugin_files=[{path}]",
                "algorithm.adv_estimator=plugin_baseline_a",
                "algorithm.overlong.enable=true",
            ],
        )
    from easyvideor1.algorithms import compute_advantages

    out = compute_advantages(
        "plugin_baseline_a", torch.tensor([1.0, 0.0]), torch.ones(2, 3), [0, 0], baseline_scores=0.5
    )
    assert out.advantages[:, 0].tolist() == [0.5, -0.5]


def test_a_bad_plugin_file_is_a_config_error_naming_the_key(tmp_path) -> None:
    with pytest.raises(ConfigError, match=r"algorithm.plugin_files: .*missing.py is not a file"):
        load_config(RunConfig, None, [f"algorithm.plugin_files=[{tmp_path / 'missing.py'}]"])
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('no')\n")
    with pytest.raises(
        ConfigError, match=r"algorithm.plugin_files: importing .*broken.py failed: RuntimeError"
    ):
        load_config(RunConfig, None, [f"algorithm.plugin_files=[{broken}]"])


LOSS_PLUGIN = """
from dataclasses import dataclass

import torch
from easyvideor1.algorithms import register_policy_loss
from easyvideor1.algorithms.policy_losses import PolicyLossOutput


@register_policy_loss("scaled_pg_{tag}")
def scaled_pg(log_prob, old_log_prob, advantages, response_mask, *, my_beta: float = 1.0):
    return PolicyLossOutput(-my_beta * advantages * log_prob * response_mask, {{}})


@dataclass
class Options:
    my_gamma: float = 0.5

    def __post_init__(self):
        if not self.my_gamma > 0:
            raise ValueError(f"algorithm.loss_options.my_gamma must be > 0, got {{self.my_gamma}}")


@register_policy_loss("declared_pg_{tag}", options=Options)
def declared_pg(log_prob, old_log_prob, advantages, response_mask, *, my_gamma):
    return PolicyLossOutput(-my_gamma * advantages * log_prob * response_mask, {{}})
"""


def test_a_plugin_loss_brings_its_own_option_from_the_config(tmp_path) -> None:
    from easyvideor1.algorithms import compute_policy_loss
    from easyvideor1.trainer.build import step_settings

    path = tmp_path / "my_losses.py"
    path.write_text(LOSS_PLUGIN.format(tag="a"))
    plugin = f"algorithm.plugin_files=[{path}]"
    cfg = load_config(
        RunConfig, None, [plugin, "algorithm.policy_loss=scaled_pg_a", "algorithm.loss_options.my_beta=2.5"]
    )
    options = step_settings(cfg).update.loss_options  # what the trainer hands the loss
    assert options == {"my_beta": 2.5}
    logp = torch.tensor([[-1.0, -2.0]])
    out = compute_policy_loss(
        "scaled_pg_a", logp, logp, torch.tensor([[1.0, 1.0]]), torch.ones(1, 2), **options
    )
    assert out.loss.tolist() == [[2.5, 5.0]], "my_beta reached the loss"
    # unset: the loss's own default; a declared options dataclass checks its values
    assert load_config(
        RunConfig, None, [plugin, "algorithm.policy_loss=scaled_pg_a"]
    ).algorithm.policy_loss_options() == {"my_beta": 1.0}
    declared = load_config(RunConfig, None, [plugin, "algorithm.policy_loss=declared_pg_a"])
    assert declared.algorithm.policy_loss_options() == {"my_gamma": 0.5}
    with pytest.raises(ConfigError, match="algorithm.loss_options.my_gamma must be > 0"):
        load_config(
            RunConfig,
            None,
            [plugin, "algorithm.policy_loss=declared_pg_a", "algorithm.loss_options.my_gamma=0"],
        )
    with pytest.raises(ConfigError, match="algorithm.loss_options.my_beat: no registered policy loss takes"):
        load_config(
            RunConfig, None, [plugin, "algorithm.policy_loss=scaled_pg_a", "algorithm.loss_options.my_beat=2"]
        )


def test_the_flat_loss_keys_still_work_with_a_deprecation_message(tmp_path) -> None:
    run = tmp_path / "run.yaml"
    run.write_text("algorithm:\n  policy_loss: gspo\n  clip_ratio_low: 0.1\n  gspo_clip_ratio_dual: 4.0\n")
    with pytest.warns(
        FutureWarning,
        match="algorithm.clip_ratio_low is deprecated: use algorithm.loss_options.clip_ratio_low",
    ):
        cfg = load_config(RunConfig, str(run), ["algorithm.clip_ratio_high=0.3"])
    assert cfg.algorithm.policy_loss_options() == {
        "clip_ratio_low": 0.1,
        "clip_ratio_high": 0.3,
        "clip_ratio_dual": 4.0,
    }
