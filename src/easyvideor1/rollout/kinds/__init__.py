"""The built-in rollout engine kinds, each registering its constructors in ``rollout/engines.py``."""
