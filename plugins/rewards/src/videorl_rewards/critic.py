"""Critic / preference: an LLM judge behind an OpenAI-compatible endpoint scores the answer against the
reference; without a judge, the answered preference label must equal the ground truth's."""

from __future__ import annotations

import ipaddress
import json
import os
import re
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


class CriticReward(TaskReward):
    """With ``judge_url`` (an OpenAI-compatible base URL such as ``http://127.0.0.1:8000/v1``):
    accuracy = the judge's 0–10 score / 10 for the answer against the reference, asked through
    ``POST {judge_url}/chat/completions`` with model ``judge_model``, temperature 0, ``request_timeout``
    seconds per request and ``retries`` retries (exponential backoff from ``backoff`` seconds) on
    connection errors, HTTP 429/5xx and replies without a score. The API key, if any, is read from the
    environment variable named by ``api_key_env``. A judge that keeps failing raises (the router scores
    the sample 0 and records the event).

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
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({} if _is_loopback(url) else None))
        problem = "no attempt made"
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            try:
                request = urllib.request.Request(url, data=body, headers=headers, method="POST")
                with opener.open(request, timeout=self.request_timeout) as response:
                    reply = json.loads(response.read(1_000_000))
                content = reply["choices"][0]["message"]["content"]
                score = parse_judge_score(str(content))
                if score is not None:
                    return score
                problem = f"reply without a 0-10 score: {str(content)[:200]!r}"
            except urllib.error.HTTPError as exc:
                problem = f"HTTP {exc.code}"
                if exc.code != 429 and exc.code < 500:
                    break
            except (OSError, ValueError, KeyError, IndexError, TypeError) as exc:
                problem = f"{type(exc).__name__}: {exc}"
        raise RuntimeError(f"judge {url} failed after {attempt + 1} attempt(s): {problem}")
