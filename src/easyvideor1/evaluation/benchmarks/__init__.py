"""Benchmark-specific prompt construction and scoring, one module per benchmark, each following that
benchmark's official evaluation code (the source is named in the module and in its spec)."""
