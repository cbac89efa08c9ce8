"""The options of the built-in distillation objectives, declared beside them (torch-free).

Set under `algorithm.distill.options` (`algorithm.distill.options.clip=0.1`); the objective's
weights, `algorithm.distill.reward_weight` and `algorithm.distill.coef`, are the section's own.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..validation import in_range, whole_number

KEY = "algorithm.distill.options"


@dataclass
class RLSDOptions:
    """RLSD's options (`algorithms/distill.py`).

    Parameters:
        clip: The evidence weight `exp(sign(A) (lp_T - lp_S))` is clipped to `[1 - clip, 1 + clip]`
            (the authors' 0.2).
        negative_only: Reweight only responses with a negative advantage.
        lambda_decay_steps: When > 0, the teacher's share `coef` falls linearly to 0 over this many
            steps (the authors' recipe: 60), after which the run is plain RLVR.
    """

    clip: float = 0.2
    negative_only: bool = False
    lambda_decay_steps: int = 0

    def __post_init__(self) -> None:
        in_range(f"{KEY}.clip", self.clip, 0.0, 1.0, low_open=True)
        whole_number(f"{KEY}.lambda_decay_steps", self.lambda_decay_steps)


@dataclass
class GKDOptions:
    """GKD's options (`algorithms/distill.py`).

    Parameters:
        top_k: The teacher's most likely ids per position the KL covers (plus one bin for the rest of
            the vocabulary); peers use 32 to 128. The teacher's log-probs of them are kept for the
            step: `N x T x top_k` floats and ids on the host.
    """

    top_k: int = 32

    def __post_init__(self) -> None:
        whole_number(f"{KEY}.top_k", self.top_k, low=1)
