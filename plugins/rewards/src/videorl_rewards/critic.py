"""Critic / preference: an LLM judge behind an OpenAI-compatible endpoint scores the answer against the
reference; without a judge, the answered preference label must equal the ground truth's."""

from __future__ import annotations

import functools
import http.client
import io
import ipaddress
import json
import os
import re
import socket
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from videorl.api import ConfigError, DataError, RewardInput, TaskReward, answers

_EXACT = {
    "1": "1", "a": "1", "first": "1", "response 1": "1", "response a": "1", "output 1": "1", "answer 1": "1",
    "2": "2", "b": "2", "second": "2", "response 2": "2", "response b": "2", "output 2": "2", "answer 2": "2",
    "tie": "tie", "0": "tie", "equal": "tie", "equally": "tie", "both": "tie", "draw": "tie", "same": "tie",
    "equally good": "tie", "both are equal": "tie",
}  # fmt: skip
_NAMED = r"(?:(?:response|output|answer|assistant)\s*([12ab])|(first|second))"
_PREFERRED = re.compile(rf"{_NAMED}(?:\s+response)?\s+is\s+(?:better|preferred|superior|more\s+\w+)", re.I)
_CHOSEN = re.compile(rf"(?:prefer|choose|select|pick)\s+(?:the\s+)?{_NAMED}", re.I)
_MENTION = re.compile(rf"\b{_NAMED}\b|\b(tie|equally\s+good|both\s+are\s+equal)\b", re.I)


def _label(match: re.Match[str]) -> str:
    token = " ".join(next(g for g in match.groups() if g).casefold().split())
    return _EXACT.get(token, "tie")


def parse_label(text: Any) -> str | None:
    """``"1"``, ``"2"`` or ``"tie"`` from a verdict ("Response 2", "B", "Response 1 is better", "tie");
    ``None`` when it names none or several without saying which is better."""
    norm = " ".join(re.sub(r"[^\w\s]", " ", str(text).casefold()).split())
    if norm in _EXACT:
        return _EXACT[norm]
    for pattern in (_PREFERRED, _CHOSEN):
        found = {_label(m) for m in pattern.finditer(str(text))}
        if len(found) == 1:
            return found.pop()
        if found:
            return None
    found = {_label(m) for m in _MENTION.finditer(str(text))}
    return found.pop() if len(found) == 1 else None


JUDGE_PROMPT = """You are grading a model's answer against a reference.

Question:
{question}

Reference answer:
{reference}

Model's answer:
{answer}

How well does the model's answer agree with the reference, from 0 (not at all) to 10 (fully)?
Reply with JSON only: {{"score": <integer 0-10>}}"""


def parse_judge_score(content: str) -> float | None:
    """The 0–10 score of a judge's reply (``{"score": 7}`` or "Score: 7"), as a fraction; ``None``
    when it has none in range."""
    value = answers.parse_json_answer(content)
    score: Any = value.get("score") if isinstance(value, dict) else None
    if score is None:
        match = re.search(r"score\W{0,3}(\d+(?:\.\d+)?)", content, re.I)
        score = float(match.group(1)) if match else None
    if isinstance(score, bool) or not isinstance(score, (int, float)) or not 0 <= score <= 10:
        return None
    return float(score) / 10


def _is_loopback(url: str) -> bool:
    host = urllib.parse.urlparse(url).hostname or ""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _remaining(deadline: float) -> float:
    """Seconds left until ``deadline`` (``time.monotonic()``); ``TimeoutError`` once it has passed."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("timed out: the request's deadline passed")
    return left


class _DeadlineReader(io.RawIOBase):
    """A connection's socket reads, each waiting at most until the deadline: a reply dripped a byte at a
    time ends there too (a socket timeout alone bounds each read, not their sum)."""

    def __init__(self, raw: io.RawIOBase, sock: socket.socket, deadline: float) -> None:
        super().__init__()
        self._raw, self._sock, self._deadline = raw, sock, deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int | None:
        self._sock.settimeout(_remaining(self._deadline))
        return self._raw.readinto(buffer)

    def fileno(self) -> int:
        return self._raw.fileno()

    def close(self) -> None:
        self._raw.close()
        super().close()


class _Response(http.client.HTTPResponse):
    def __init__(self, sock: socket.socket, *args: Any, deadline: float, **kwargs: Any) -> None:
        super().__init__(sock, *args, **kwargs)
        self.fp = io.BufferedReader(_DeadlineReader(self.fp.detach(), sock, deadline))


class _Connection(http.client.HTTPConnection):
    """An HTTP connection whose connect, sends and reads all end by ``deadline``."""

    def __init__(self, host: str, *, deadline: float, **kwargs: Any) -> None:
        super().__init__(host, **kwargs)
        self.deadline = deadline
        self.response_class = functools.partial(_Response, deadline=deadline)  # type: ignore[assignment]

    def connect(self) -> None:
        self.timeout = _remaining(self.deadline)
        super().connect()

    def send(self, data: Any) -> None:
        if self.sock is not None:
            self.sock.settimeout(_remaining(self.deadline))
        super().send(data)


class _TLSConnection(_Connection):
    """``_Connection`` over TLS to ``server_hostname`` (directly or through a proxy's tunnel)."""

    default_port = http.client.HTTPS_PORT

    def __init__(self, host: str, *, server_hostname: str, **kwargs: Any) -> None:
        super().__init__(host, **kwargs)
        self.server_hostname = server_hostname

    def connect(self) -> None:
        super().connect()
        self.sock.settimeout(_remaining(self.deadline))
        self.sock = ssl.create_default_context().wrap_socket(self.sock, server_hostname=self.server_hostname)


class _Handler(urllib.request.AbstractHTTPHandler):
    """Opens http and https URLs through ``_Connection`` / ``_TLSConnection``."""

    def __init__(self, deadline: float, host: str) -> None:
        super().__init__()
        self.deadline, self.host = deadline, host

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(functools.partial(_Connection, deadline=self.deadline), req)

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        tls = functools.partial(_TLSConnection, deadline=self.deadline, server_hostname=self.host)
        return self.do_open(tls, req)

    http_request = https_request = urllib.request.AbstractHTTPHandler.do_request_


def _opener(url: str, deadline: float) -> urllib.request.OpenerDirector:
    """What opens one judge request: the environment's proxies (none for loopback), connections that
    end by ``deadline``, and no redirect handler, so that a redirect is an ``HTTPError`` and the API
    key never reaches another host (or the same one without TLS)."""
    opener = urllib.request.OpenerDirector()
    handlers = (
        urllib.request.ProxyHandler({} if _is_loopback(url) else None),
        _Handler(deadline, urllib.parse.urlparse(url).hostname or ""),
        urllib.request.HTTPDefaultErrorHandler(),
        urllib.request.HTTPErrorProcessor(),
    )
    for handler in handlers:
        opener.add_handler(handler)
    return opener


class CriticReward(TaskReward):
    """With ``judge_url`` (an OpenAI-compatible base URL such as ``http://127.0.0.1:8000/v1``):
    accuracy = the judge's 0–10 score / 10 for the answer against the reference, asked through
    ``POST {judge_url}/chat/completions`` with model ``judge_model``, temperature 0, and ``retries``
    retries (exponential backoff from ``backoff`` seconds) on connection errors, HTTP 429/5xx and replies
    without a score. Each request is over within ``request_timeout`` seconds, however slowly the judge
    answers: connecting, sending and every read end by that deadline, and the connection is closed. The
    API key, if any, is read from the environment variable named by ``api_key_env`` and sent to
    ``judge_url``'s host only: redirects are refused (an error naming the target), never followed. A
    judge that keeps failing raises (the router scores the sample 0 and records the event).

    Without a judge: accuracy 1 when the answered preference label ("Response 1", "B", "tie", ...)
    equals the ground truth's, else 0.
    """

    name = "critic"

    def __init__(
        self,
        *,
        judge_url: str | None = None,
        judge_model: str = "judge",
        api_key_env: str | None = None,
        retries: int = 2,
        request_timeout: float = 30.0,
        backoff: float = 0.5,
        max_chars: int = 20_000,
        **common: Any,
    ) -> None:
        super().__init__(**common)
        if judge_url is not None and urllib.parse.urlparse(judge_url).scheme not in ("http", "https"):
            raise ConfigError(f"critic: judge_url must be an http(s) URL, got {judge_url!r}")
        if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
            raise ConfigError(f"critic: retries must be a non-negative integer, got {retries!r}")
        self.judge_url = judge_url.rstrip("/") if judge_url else None
        self.judge_model = judge_model
        self.api_key_env = api_key_env
        self.retries = retries
        self.request_timeout = float(request_timeout)
        self.backoff = float(backoff)
        self.max_chars = int(max_chars)

    def parse_answer(self, text: Any, inp: RewardInput) -> str | None:
        if self.judge_url:
            return str(text).strip()[: self.max_chars] or None
        return parse_label(text)

    def parse_truth(self, inp: RewardInput) -> str:
        truth = inp.ground_truth
        if isinstance(truth, str):
            tagged = answers.extract_tag(truth)
            truth = tagged if tagged is not None else truth
        parsed = str(truth).strip() if self.judge_url else parse_label(truth)
        if not parsed:
            raise DataError(
                f"sample {inp.sample_id!r}: the ground truth {str(inp.ground_truth)[:200]!r} is not a "
                "preference label (Response 1 / Response 2 / tie); configure a judge_url to grade free text"
            )
        return parsed

    def accuracy(self, answer: str, truth: str, inp: RewardInput) -> float:
        if self.judge_url:
            return self.judge(inp.problem, answer, truth)
        return 1.0 if answer == truth else 0.0

    def judge(self, question: str, answer: str, reference: str) -> float:
        """The judge's score in [0, 1]; raises ``RuntimeError`` when every attempt failed."""
        assert self.judge_url is not None
        prompt = JUDGE_PROMPT.format(question=question or "(not given)", reference=reference, answer=answer)
        body = json.dumps(
            {
                "model": self.judge_model,
                "messages": [{"role": "user", "content": prompt}],
                "temperature": 0.0,
                "max_tokens": 64,
            }
        ).encode()
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        if key:
            headers["Authorization"] = f"Bearer {key}"
        url = f"{self.judge_url}/chat/completions"
        problem = "no attempt made"
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            deadline = time.monotonic() + self.request_timeout
            try:
                request = urllib.request.Request(url, data=body, headers=headers, method="POST")
                with _opener(url, deadline).open(request, timeout=self.request_timeout) as response:
                    reply = json.loads(response.read(1_000_000))
                content = reply["choices"][0]["message"]["content"]
                score = parse_judge_score(str(content))
                if score is not None:
                    return score
                problem = f"reply without a 0-10 score: {str(content)[:200]!r}"
            except urllib.error.HTTPError as exc:
                problem = f"HTTP {exc.code}"
                if 300 <= exc.code < 400:
                    target = str(exc.headers.get("Location", ""))[:200]
                    problem += f": redirect to {target!r} refused (the API key goes to judge_url's host only)"
                if exc.code != 429 and exc.code < 500:
                    break
            except (OSError, http.client.HTTPException, ValueError, KeyError, IndexError, TypeError) as exc:
                problem = f"{type(exc).__name__}: {exc}"
        raise RuntimeError(f"judge {url} failed after {attempt + 1} attempt(s): {problem}")
