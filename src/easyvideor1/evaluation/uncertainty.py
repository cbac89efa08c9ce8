"""95% intervals for a benchmark's headline: standard errors clustered by video.

Several questions about one video are not independent draws (a model that misreads the video tends
to miss all of them), so an interval that treats them as independent is too narrow. The definition
follows lmms-eval v0.6 (``lmms_eval/api/metrics.py: clustered_stderr``, which implements Eq. 4 of
Miller, "Adding Error Bars to Evals", arXiv:2411.00640). For ``n`` scored samples with scores
``s_i``, mean ``m`` and deviations ``d_i = s_i - m``, grouped into ``G`` clusters ``c``:

- ``stderr`` (unclustered, lmms-eval's ``stderr_clt``): ``sqrt(sum_i d_i^2 / (n (n - 1)))``.
- ``stderr_clustered``: ``sqrt(stderr^2 + (1/n^2) sum_c sum_{i != j in c} d_i d_j)``, which is
  ``sqrt((1/n^2) [sum_c (sum_{i in c} d_i)^2 + sum_i d_i^2 / (n - 1)])``.
- ``ci95``: ``m +- 1.96 stderr_clustered`` (the normal critical value, as in Miller's intervals;
  lmms-eval prints the standard error only), clipped to [0, 1], the range of the scores (a
  scorer giving values outside it widens that range to theirs).

The textbook cluster-robust SE of a mean (Liang-Zeger; CR1 as Stata computes it) is
``sqrt(G/(G - 1) (1/n^2) sum_c (sum_{i in c} d_i)^2)``. lmms-eval's differs in its small-sample
correction: no ``G/(G - 1)`` factor on the between-cluster sum, an ``n/(n - 1)`` one on the
diagonal. We follow lmms-eval, so a ``stderr_clustered`` here equals the one lmms-eval v0.6 reports
for the same scores and clusters; both reduce exactly to ``stderr`` when no two samples share a
video. With many questions per video and few videos, CR1 is wider by up to ``sqrt(G/(G - 1))``, and
with under ~30 videos a normal interval covers less than 95%: read such intervals as rough.

Clusters: one per video file (the record's ``videos``); a sample without a video (text, images) is
its own cluster (lmms-eval puts every sample without a cluster id into one shared cluster). With a
single cluster (every question about one video) there is no between-video spread to estimate from:
like lmms-eval, no clustered SE and no interval, with the reason, never a division by zero.
"""

from __future__ import annotations

import math
import os
from collections import defaultdict
from collections.abc import Hashable, Sequence
from statistics import NormalDist
from typing import Any

from ..data.records import Record

Z95 = NormalDist().inv_cdf(0.975)  # 1.959963984540054
INTERVAL_KEYS = ("stderr", "stderr_clustered", "ci95", "ci95_reason", "n_clusters")


def video_clusters(records: Sequence[Record]) -> list[Hashable]:
    """One cluster id per record: its video files, or its own position when it has none."""
    return [
        tuple(os.path.normpath(v) for v in rec.videos) if rec.videos else ("no video", k)
        for k, rec in enumerate(records)
    ]


def clustered_stderr(values: Sequence[float], clusters: Sequence[Hashable]) -> float:
    """lmms-eval's clustered standard error of ``mean(values)`` (module docstring); needs two values."""
    n = len(values)
    mean = sum(values) / n
    by_cluster: dict[Hashable, float] = defaultdict(float)
    for value, cluster in zip(values, clusters, strict=True):
        by_cluster[cluster] += value - mean
    squares = sum((v - mean) ** 2 for v in values)
    between = sum(total * total for total in by_cluster.values())
    return math.sqrt((between + squares / (n - 1)) / (n * n))


def mean_interval(values: Sequence[float], clusters: Sequence[Hashable]) -> dict[str, Any]:
    """The ``INTERVAL_KEYS`` of ``mean(values)``: standard errors, the 95% interval (None with
    ``ci95_reason`` when there is none) and the number of clusters."""
    n, n_clusters = len(values), len(set(clusters))
    if n < 2:
        return no_interval(
            f"{n} scored sample{'' if n == 1 else 's'}: a standard error needs two", n_clusters
        )
    mean = sum(values) / n
    stderr = math.sqrt(sum((v - mean) ** 2 for v in values) / (n * (n - 1)))
    if n_clusters < 2:
        out = no_interval("every sample shares one video: no spread between videos to estimate from", 1)
        return {**out, "stderr": stderr}
    se = clustered_stderr(values, clusters)
    floor, ceiling = min(0.0, *values), max(1.0, *values)  # [0, 1] unless a score lies outside it
    return {
        "stderr": stderr,
        "stderr_clustered": se,
        "ci95": [max(floor, mean - Z95 * se), min(ceiling, mean + Z95 * se)],
        "ci95_reason": None,
        "n_clusters": n_clusters,
    }


def no_interval(reason: str, n_clusters: int | None = None) -> dict[str, Any]:
    """The ``INTERVAL_KEYS`` of a number that has no interval, saying why."""
    return {
        "stderr": None,
        "stderr_clustered": None,
        "ci95": None,
        "ci95_reason": reason,
        "n_clusters": n_clusters,
    }
