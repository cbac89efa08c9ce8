"""How the pipeline's loader side ends a job: a user error (a record, a key) as it is, anything
else as the reason the loading stopped."""

from __future__ import annotations

import queue

import pytest

from easyvideor1.data.records import RecordError
from easyvideor1.outdir import OutputError
from easyvideor1.rollout.pipeline import _next


def _ready(item) -> queue.Queue:
    ready: queue.Queue = queue.Queue()
    ready.put(item)
    return ready


def test_a_user_error_from_the_loaders_reaches_the_caller_as_it_is():
    error = RecordError("train.jsonl: record 3 (p3)", "no problem text")
    with pytest.raises(RecordError) as raised:
        _next(_ready(error))
    assert raised.value is error
    with pytest.raises(OutputError):
        _next(_ready(OutputError("cannot write out/thumbs: No space left on device")))


def test_a_loader_that_died_stops_the_job_with_its_reason():
    with pytest.raises(RuntimeError, match="media loading stopped: KeyError: 'frame_indices'"):
        _next(_ready(KeyError("frame_indices")))
    assert _next(_ready("a sample")) == "a sample"
