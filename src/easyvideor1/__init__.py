"""EasyVideoR1: RL with verifiable rewards for video language models."""

__version__ = "0.1.0"
