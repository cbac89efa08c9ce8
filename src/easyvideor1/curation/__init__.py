"""Offline data curation by pass rate (``easyvideor1 filter``).

The EasyVideoR1 report builds its training set by sampling the base model k=8 times per
question and keeping the questions it neither always nor never solves. This package does that
with the evaluation engines and the training reward library: ``filter.py`` samples and scores
(resumable), ``passes.py`` says what a pass is and which pass rates are kept, ``outputs.py``
writes ``pass_rates.jsonl`` and the kept records in each input's format, ``report.py`` the
report and histogram, ``job.py`` runs the whole job.
"""

from .filter import FilterSettings
from .job import curate, finish
from .passes import Band, PassRule, default_threshold

__all__ = ["Band", "FilterSettings", "PassRule", "curate", "default_threshold", "finish"]
