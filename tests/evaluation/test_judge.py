"""The optional LLM judge: an OpenAI-compatible endpoint (a local stand-in server) and a local model."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from easyvideor1.evaluation import judge
from easyvideor1.rewards import RewardConfig, compute_score
from easyvideor1.rewards.judge_scoring import JudgeFailed


@pytest.fixture
def endpoint(monkeypatch):
    seen = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append(body)
            user = body["messages"][-1]["content"]
            same = "Model answer: a red ball" in user and "Ground truth: a red ball" in user
            reply = "They match.\nJudgement: 1" if same else "Different.\nJudgement: 0"
            data = json.dumps({"choices": [{"message": {"content": reply}}]}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("EASYVIDEOR1_JUDGE_URL", f"http://127.0.0.1:{server.server_port}/v1/chat/completions")
    yield seen
    server.shutdown()


def test_openai_compatible_judge_grades_open_ended_answers(endpoint):
    cfg = RewardConfig(llm_judge="easyvideor1.evaluation.judge:openai_judge")
    right = compute_score("<answer>a red ball</answer>", "a red ball", "open-ended", config=cfg)
    wrong = compute_score("<answer>a blue cube</answer>", "a red ball", "open-ended", config=cfg)
    assert right["accuracy"] == 1.0 and wrong["accuracy"] == 0.0
    assert endpoint[0]["messages"][0]["role"] == "system" and endpoint[0]["temperature"] == 0.0
    # off by default: ROUGE, no request
    before = len(endpoint)
    compute_score("<answer>a red ball</answer>", "a red ball", "open-ended")
    assert len(endpoint) == before


@pytest.mark.parametrize(
    "reply,verdict",
    [
        ("ok\nJudgement: 1", 1.0),
        ("Judgement: 1 ... Judgement: 0", 0.0),
        ("judgement:0", 0.0),
        ("I think yes", None),
        ("", None),
    ],
)
def test_parse_judgement(reply, verdict):
    assert judge.parse_judgement(reply) == verdict


def test_local_judge_runs_a_local_model_and_counts_unparsable_replies(tmp_path, monkeypatch):
    from easyvideor1.models.tiny import make_tiny_model

    path = make_tiny_model(str(tmp_path / "judge"))
    monkeypatch.setenv("EASYVIDEOR1_JUDGE_MODEL", path)
    judge._local.cache_clear()
    before = judge.failures["unparsable"]
    with pytest.raises(JudgeFailed, match="no verdict"):  # a random tiny model gives none: not a 0
        judge.local_judge("a red ball", "a red ball")
    assert judge.failures["unparsable"] == before + 1
