"""The critic reward: preference-label matching, and an LLM judge served on 127.0.0.1 by http.server."""

from __future__ import annotations

import gc
import json
import os
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from videorl.api import DataError, RewardInput, RewardRouter
from videorl.testing import assert_reward_contract
from videorl_rewards.critic import CriticReward, parse_judge_score, parse_label


def case(response: str, expected: float, truth: str = "Response 2") -> tuple[RewardInput, float]:
    return RewardInput(
        response, "llava", truth, problem="Which response is better?", sample_id="cr"
    ), expected


def test_label_golden_cases() -> None:
    cases = [
        case("<answer>Response 2</answer>", 1.0),
        case("<answer>B</answer>", 1.0),
        case("<answer>Response 1</answer>", 0.1),
        case("<answer>Response 2 is better than Response 1</answer>", 1.0),
        case("<answer>Response 1 vs Response 2</answer>", 0.05),  # names both, prefers neither
        case("<answer>tie</answer>", 0.1),
        case("", 0.0),
        case("<answer>Both are equal.</answer>", 1.0, truth="tie"),
        case("I prefer the second response", 0.9),
        case('<answer>{"verdict": </answer>', 0.05),  # malformed JSON: no label
        case("<answer>first</answer>", 1.0, truth="<answer>Response 1</answer>"),
    ]
    assert_reward_contract(CriticReward(), cases)
    with pytest.raises(DataError, match="not a preference label"):
        CriticReward()(case("<answer>B</answer>", 0, truth="banana")[0])


def test_parse_helpers() -> None:
    assert parse_label("I choose response A") == "1"
    assert parse_judge_score('{"score": 7}') == 0.7
    assert parse_judge_score("Score: 10") == 1.0
    assert parse_judge_score('{"score": 42}') is None
    assert parse_judge_score("looks fine") is None


class Judge:
    """A scripted OpenAI-compatible chat endpoint on 127.0.0.1: each request pops the next reply
    (``(status, content)`` or ``("sleep", seconds)``); the last reply repeats."""

    def __init__(self, replies: list[tuple[Any, Any]], tls: ssl.SSLContext | None = None) -> None:
        self.replies = replies
        self.requests: list[dict[str, Any]] = []
        judge = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                judge.requests.append(
                    {"path": self.path, "body": body, "auth": self.headers.get("Authorization")}
                )
                status, content = judge.replies[0] if len(judge.replies) == 1 else judge.replies.pop(0)
                if status == "sleep":
                    time.sleep(content)
                    status, content = 200, '{"score": 10}'
                payload = json.dumps({"choices": [{"message": {"role": "assistant", "content": content}}]})
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(payload.encode())

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
            self.url = self.url.replace("http://", "https://")
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def judge() -> Iterator[Callable[..., Judge]]:
    judges: list[Judge] = []

    def start(*replies: tuple[Any, Any], tls: ssl.SSLContext | None = None) -> Judge:
        judges.append(Judge(list(replies), tls))
        return judges[-1]

    yield start
    for j in judges:
        j.close()


def judged(url: str, **options: Any) -> CriticReward:
    return CriticReward(judge_url=url, judge_model="tiny-judge", backoff=0.01, **options)


def test_judge_scores_the_answer(judge: Callable[..., Judge], monkeypatch: pytest.MonkeyPatch) -> None:
    server = judge((200, '{"score": 8}'))
    monkeypatch.setenv("JUDGE_KEY", "sekrit")
    reward = judged(server.url, api_key_env="JUDGE_KEY")
    inp = RewardInput(
        "<answer>The first is more accurate.</answer>", "critic", "Response 1", problem="Which?"
    )
    assert_reward_contract(reward, [(inp, 0.9 * 0.8 + 0.1)])
    request = server.requests[0]
    assert request["path"] == "/v1/chat/completions" and request["auth"] == "Bearer sekrit"
    assert request["body"]["model"] == "tiny-judge" and request["body"]["temperature"] == 0.0
    prompt = request["body"]["messages"][0]["content"]
    assert "Which?" in prompt and "Response 1" in prompt and "The first is more accurate." in prompt


def test_judge_retries_server_errors(judge: Callable[..., Judge]) -> None:
    server = judge((500, ""), (200, "Score: 5"))
    out = judged(server.url, retries=2)(case("<answer>meh</answer>", 0)[0])
    assert out is not None and out.score == pytest.approx(0.9 * 0.5 + 0.1)
    assert len(server.requests) == 2


def test_judge_reply_without_score_fails_after_retries(judge: Callable[..., Judge]) -> None:
    server = judge((200, "I think it is good"))
    with pytest.raises(RuntimeError, match=r"failed after 3 attempt\(s\): reply without a 0-10 score"):
        judged(server.url, retries=2)(case("<answer>meh</answer>", 0)[0])
    assert len(server.requests) == 3


def test_client_errors_are_not_retried(judge: Callable[..., Judge]) -> None:
    server = judge((400, ""))
    with pytest.raises(RuntimeError, match=r"after 1 attempt\(s\): HTTP 400"):
        judged(server.url, retries=3)(case("<answer>meh</answer>", 0)[0])
    assert len(server.requests) == 1


def test_slow_judge_times_out_and_the_router_scores_zero(judge: Callable[..., Judge]) -> None:
    server = judge(("sleep", 1.0))
    router = RewardRouter.of(
        {"critic": judged(server.url, retries=1, request_timeout=0.2)}, aliases={"llava": "critic"}
    )
    start = time.monotonic()
    out = router.score([case("<answer>meh</answer>", 0)[0]])[0]
    assert time.monotonic() - start < 1.5
    assert out is not None and out.score == 0.0 and out.error is not None and "timed out" in out.error
    assert router.event_counts == {"error": 1}


def test_unreachable_judge(judge: Callable[..., Judge]) -> None:
    server = judge((200, "{}"))
    url = server.url
    server.close()
    with pytest.raises(RuntimeError, match="failed after 1 attempt"):
        judged(url, retries=0)(case("<answer>meh</answer>", 0)[0])


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_redirects_are_refused_and_the_key_stays_home(
    status: int, judge: Callable[..., Judge], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A judge that redirects (to another port of 127.0.0.1 here, to any host in the issue) gets an
    error naming the target, and the other host never sees a request, let alone the API key."""
    elsewhere = judge((200, '{"score": 10}'))
    redirecting = RedirectingJudge(status, f"{elsewhere.url}/chat/completions")
    monkeypatch.setenv("JUDGE_KEY", "sekrit")
    try:
        with pytest.raises(RuntimeError, match=rf"after 1 attempt\(s\): HTTP {status}: redirect to 'http://"):
            judged(redirecting.url, api_key_env="JUDGE_KEY", retries=2)(case("<answer>meh</answer>", 0)[0])
    finally:
        redirecting.close()
    assert redirecting.auth == ["Bearer sekrit"]  # asked once, not retried
    assert elsewhere.requests == []


class RedirectingJudge:
    """Answers every request with ``status`` and ``Location: target``; records the Authorization headers."""

    def __init__(self, status: int, target: str, tls: ssl.SSLContext | None = None) -> None:
        self.auth: list[str | None] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                outer.auth.append(self.headers.get("Authorization"))
                self.send_response(status)
                self.send_header("Location", target)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
            self.url = self.url.replace("http://", "https://")
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class DrippingJudge:
    """A judge on 127.0.0.1 that, after the status line (and, for ``"body"``, complete headers), sends
    one byte every 0.2 s for 20 s; ``hung_up`` is set once the client has closed the connection."""

    def __init__(self, where: str) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/v1"
        self.hung_up = threading.Event()
        self.head = b"HTTP/1.1 200 OK\r\n"
        if where == "body":
            self.head += b"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n"
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        conn, _ = self.listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(self.head)
            try:
                for _ in range(100):
                    time.sleep(0.2)
                    conn.sendall(b"x")
            except OSError:
                self.hung_up.set()


@pytest.mark.parametrize("where", ["headers", "body"])
def test_a_dripping_judge_is_abandoned_at_the_deadline(where: str) -> None:
    """The issue: the timeout was per read, so a judge dripping its reply held a thread and a socket
    per call. Now the request ends at ``request_timeout`` in all, and its connection is closed."""
    server = DrippingJudge(where)
    threads = set(threading.enumerate())
    descriptors = len(os.listdir("/proc/self/fd"))
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"after 1 attempt\(s\): .*timed out"):
        judged(server.url, retries=0, request_timeout=1.0)(case("<answer>meh</answer>", 0)[0])
    assert 1.0 <= time.monotonic() - start < 1.5
    assert server.hung_up.wait(2.0), "the connection was left open"
    server.thread.join(2.0)
    server.listener.close()
    gc.collect()
    assert set(threading.enumerate()) == threads - {server.thread}
    assert len(os.listdir("/proc/self/fd")) == descriptors - 1  # the listener, closed


@pytest.fixture
def tls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ssl.SSLContext:
    """A server context with a self-signed certificate for 127.0.0.1, which the client trusts."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed: no certificate for a TLS judge")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    request = ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=judge"]
    subprocess.run(
        [
            "openssl",
            *request,
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return context


def test_a_judge_over_tls_and_no_downgrade(
    judge: Callable[..., Judge], tls: ssl.SSLContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """https works (the certificate checked against the judge's host), and an https judge that
    redirects to plain http gets an error: the key never travels unencrypted."""
    monkeypatch.setenv("JUDGE_KEY", "sekrit")
    secure = judge((200, '{"score": 6}'), tls=tls)
    out = judged(secure.url, api_key_env="JUDGE_KEY")(case("<answer>meh</answer>", 0)[0])
    assert out is not None and out.score == pytest.approx(0.9 * 0.6 + 0.1)
    assert secure.requests[0]["auth"] == "Bearer sekrit"
    plain = judge((200, '{"score": 10}'))
    downgrading = RedirectingJudge(302, f"{plain.url}/chat/completions", tls=tls)
    try:
        with pytest.raises(RuntimeError, match=r"HTTP 302: redirect to 'http://127.0.0.1:\d+/v1/chat"):
            judged(downgrading.url, api_key_env="JUDGE_KEY")(case("<answer>meh</answer>", 0)[0])
    finally:
        downgrading.close()
    assert plain.requests == []
