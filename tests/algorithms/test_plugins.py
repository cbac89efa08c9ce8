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
