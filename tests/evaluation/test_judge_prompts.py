"""The built-in OpenAI-compatible judge with a benchmark's official judge prompt: VideoReasonBench's
prompt is sent as the only message and its "Correct"/"Incorrect" reply is read (a real local HTTP
server stands in for the endpoint)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from easyvideor1.evaluation import get_benchmark, judge
from easyvideor1.rewards import RewardConfig
from tests.evaluation.benchmark_cases import gold_response, write_unshipped


@pytest.fixture
def endpoint(monkeypatch):
    seen = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append(body)
            user = body["messages"][-1]["content"]
            right = "Model Response:\n1st: Queen of Clubs" in user
            data = json.dumps({"choices": [{"message": {"content": "Correct" if right else "Incorrect"}}]})
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data.encode())

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("EASYVIDEOR1_JUDGE_URL", f"http://127.0.0.1:{server.server_port}/v1/chat/completions")
    yield seen
    server.shutdown()


def test_videoreasonbench_through_the_openai_judge(endpoint, tmp_path):
    spec = get_benchmark("videoreasonbench")
    write_unshipped("videoreasonbench", spec.annotation, tmp_path)
    rec = spec.load(str(tmp_path))[0]
    cfg = RewardConfig(llm_judge="easyvideor1.evaluation.judge:openai_judge")
    right = spec.score_response(rec, gold_response("videoreasonbench", rec), reward_config=cfg)
    wrong = spec.score_response(rec, "Final Answer: 1st: King of Spades, pile1", reward_config=cfg)
    assert right["accuracy"] == 1.0 and wrong["accuracy"] == 0.0
    messages = endpoint[0]["messages"]
    assert len(messages) == 1 and messages[0]["role"] == "user"  # the official prompt, nothing added
    assert messages[0]["content"].startswith("You will be given a question, a model response and a ground")
    assert messages[0]["content"].endswith('Directly output "Correct" or "Incorrect":\n')


@pytest.mark.parametrize(
    "reply,verdict",
    [("Correct", 1.0), ("correct.", 1.0), ("Incorrect", 0.0), ("**Incorrect**", 0.0), ("Maybe", None)],
)
def test_correct_incorrect_replies(reply, verdict):
    assert judge.parse_correct(reply) == verdict


def test_generic_judge_prompt_carries_the_question():
    messages = judge._messages("Kitchen", "kitchen", {"question": "Which room?"})
    assert messages[0]["role"] == "system" and messages[1]["content"].startswith("Question: Which room?\n")
