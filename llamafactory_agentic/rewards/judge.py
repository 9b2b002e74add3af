# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.

r"""LLM-as-judge (docs/algorithms.md section 9) with a persistent verdict cache.

Any OpenAI-compatible chat endpoint (`POST {base_url}/chat/completions`) at temperature 0 is asked the reference's
question (the prompt text of RUC-NLPIR/ARPO `evaluation/src/llm_evaluator_sds.py`, kept word for word because it is
part of the protocol). Decision rule: correct if the prediction is already equivalent by rule (exact match after
normalisation, or math-verify), else if the reply (its `<judgment>` part when present) contains "correct" and none of
"incorrect", "wrong", "not correct". Rule-equivalent and answerless samples make no call.

Every reply is kept raw. A call that still fails after its retries (network error, timeout, HTTP 5xx/429 after the
last attempt, any other HTTP error, a body that is not a chat completion) is a judge error: counted, shown, never
replaced by the rule, and not cached, so the next scoring pass asks again. Verdicts are cached in SQLite keyed by
(judge model, prompt), so scoring the same records again makes no call.
"""

import hashlib
import os
import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
from tenacity import RetryError, retry, retry_if_exception, stop_after_attempt, wait_exponential

from ..common.log import get_logger


logger = get_logger(__name__)

JUDGE_PROMPT = (
    "Given a Question and its Golden Answer, verify whether the Predicted Answer is correct. The prediction is "
    'correct if it fully aligns with the meaning and key information of the Golden Answer. Respond with "Correct" '
    'if the prediction is correct and "Incorrect" otherwise.\n'
    "Golden Answer may have multiple options, and matching any one of them is considered correct.\n\n"
    "Question: {question}\n"
    "Golden Answer: {labeled_answer}\n"
    "Predicted Answer: {pred_answer}\n"
)
NEGATIVE_MARKERS = ("incorrect", "wrong", "not correct")


def judge_prompt(question: str, answers: list[str], prediction: str) -> str:
    r"""The judge's user message; several aliases are shown as a list, one alias as itself."""
    labeled = answers[0] if len(answers) == 1 else str(list(answers))
    return JUDGE_PROMPT.format(question=question, labeled_answer=labeled, pred_answer=prediction)


def reply_says_correct(reply: str) -> bool:
    r"""The decision rule on a judge reply (its `<judgment>…</judgment>` part when present).

    Examples: "Correct" -> True; "Incorrect", "The prediction is not correct", "wrong" -> False; "banana" -> False.
    """
    text = reply
    start, end = text.find("<judgment>"), text.find("</judgment>")
    if 0 <= start < end:
        text = text[start + len("<judgment>") : end]
    low = text.strip().lower()
    return "correct" in low and not any(marker in low for marker in NEGATIVE_MARKERS)


@dataclass
class Verdict:
    r"""Outcome of judging one record.

    Attributes:
        correct: The verdict (None when the call failed).
        source: `judge` (a call made now), `cache`, `rule` (equivalent by rule, no call), `no_prediction` (no
            answer to judge, no call) or `error`.
        reply: The judge's raw reply (None without a call).
        error: What failed (source `error`).
    """

    correct: bool | None
    source: str
    reply: str | None = None
    error: str = ""


class JudgeError(RuntimeError):
    r"""A judge call failed after its retries."""


def open_sqlite_cache(path: str | os.PathLike, create_table: str) -> tuple[str, threading.Lock, sqlite3.Connection]:
    r"""`(path, lock, connection)` of a SQLite cache file (folder created, WAL, `create_table` run), shared by threads.

    Used by the judge's `VerdictCache` and the evaluation's `endpoint.ResponseCache`; the lock serialises this
    process's threads, WAL and the 60 s busy timeout other processes.
    """
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    conn = sqlite3.connect(str(path), timeout=60, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(create_table)
    conn.commit()
    return str(path), threading.Lock(), conn


def retryable_http_error(exc: BaseException) -> bool:
    r"""True for errors worth another request: 5xx, 429, transport errors and timeouts (judge and endpoints)."""
    if isinstance(exc, httpx.HTTPStatusError):
        return exc.response.status_code >= 500 or exc.response.status_code == 429
    return isinstance(exc, (httpx.TransportError, httpx.TimeoutException))


class VerdictCache:
    r"""SQLite table `verdicts(key, model, prompt, reply, correct, created)`; safe across threads and processes.

    Args:
        path: The database file (created with its folder).
    """

    def __init__(self, path: str | os.PathLike) -> None:
        r"""Open (or create) the cache file."""
        self.path, self._lock, self._conn = open_sqlite_cache(
            path,
            "CREATE TABLE IF NOT EXISTS verdicts (key TEXT PRIMARY KEY, model TEXT, prompt TEXT, reply TEXT, "
            "correct INTEGER, created REAL)",
        )

    @staticmethod
    def key(model: str, prompt: str) -> str:
        r"""SHA-256 of the judge model and the prompt."""
        return hashlib.sha256(f"{model}\n{prompt}".encode()).hexdigest()

    def get(self, model: str, prompt: str) -> tuple[str, bool] | None:
        r"""`(reply, correct)` of a cached verdict, or None."""
        with self._lock:
            row = self._conn.execute(
                "SELECT reply, correct FROM verdicts WHERE key = ?", (self.key(model, prompt),)
            ).fetchone()
        return None if row is None else (row[0], bool(row[1]))

    def put(self, model: str, prompt: str, reply: str, correct: bool) -> None:
        r"""Store a verdict (an existing one is kept)."""
        with self._lock:
            self._conn.execute(
                "INSERT OR IGNORE INTO verdicts VALUES (?, ?, ?, ?, ?, ?)",
                (self.key(model, prompt), model, prompt, reply, int(correct), time.time()),
            )
            self._conn.commit()

    def __len__(self) -> int:
        r"""Number of cached verdicts."""
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM verdicts").fetchone()[0])

    def close(self) -> None:
        r"""Close the connection."""
        with self._lock:
            self._conn.close()


class ChatClient:
    r"""One OpenAI-compatible chat endpoint (`POST {base_url}/chat/completions`) at temperature 0, with retries.

    Shared by the judge (`LLMJudge`) and the summariser of the `browse` search mode (`tools/browse.py`).

    Args:
        base_url: e.g. `http://127.0.0.1:8000/v1`.
        model: Model name sent with every request.
        api_key: Bearer token (None: no Authorization header).
        timeout_s: Seconds per request.
        retries: Attempts per request (HTTP 5xx, 429, network errors, timeouts; exponential backoff).
        retry_wait_s: First backoff wait in seconds (doubles, at most 30 s).
        max_tokens: Most tokens per reply (None: the server's default).
        temperature: Sampling temperature sent with every request (None: none sent, the server's default, as the
            reference harness's judge requests; docs/algorithms.md section 9.3).

    Attributes:
        calls: HTTP requests sent (retries included).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout_s: float = 120.0,
        retries: int = 3,
        retry_wait_s: float = 1.0,
        max_tokens: int | None = None,
        temperature: float | None = 0.0,
    ) -> None:
        r"""Create the client (arguments in the class docstring)."""
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.max_tokens = max_tokens
        self.temperature = temperature
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(timeout=timeout_s, headers=headers)
        self._retries = max(1, int(retries))
        self._wait = float(retry_wait_s)
        self._count_lock = threading.Lock()
        self.calls = 0

    def _post(self, prompt: str) -> str:
        with self._count_lock:
            self.calls += 1
        body: dict[str, Any] = {"model": self.model, "messages": [{"role": "user", "content": prompt}]}
        if self.temperature is not None:
            body["temperature"] = float(self.temperature)
        if self.max_tokens:
            body["max_tokens"] = int(self.max_tokens)
        response = self._client.post(self.url, json=body)
        response.raise_for_status()
        try:
            content = response.json()["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError) as err:
            raise JudgeError(f"not a chat completion: {response.text[:200]!r}") from err
        if not isinstance(content, str):
            raise JudgeError(f"reply content is {type(content).__name__}, not text")
        return content

    def _ask(self, prompt: str) -> str:
        call = retry(
            retry=retry_if_exception(retryable_http_error),
            stop=stop_after_attempt(self._retries),
            wait=wait_exponential(multiplier=self._wait, max=30),
            reraise=False,
        )(self._post)
        try:
            return call(prompt)
        except RetryError as err:
            raise JudgeError(f"{err.last_attempt.exception()}") from None
        except (httpx.HTTPError, JudgeError) as err:
            raise JudgeError(str(err)) from None

    def ask(self, prompt: str) -> str:
        r"""The reply text to one user message.

        Raises:
            JudgeError: the call failed after its retries, or the reply is not a chat completion with text.
        """
        return self._ask(prompt)

    def close(self) -> None:
        r"""Close the HTTP client."""
        self._client.close()


class LLMJudge(ChatClient):
    r"""Judge records through an OpenAI-compatible chat endpoint.

    Args:
        base_url: e.g. `http://127.0.0.1:8000/v1`.
        model: Judge model name.
        cache: The verdict cache.
        api_key: Bearer token (None: no Authorization header).
        timeout_s: Seconds per request.
        retries: Attempts per request (HTTP 5xx, 429, network errors, timeouts; exponential backoff).
        workers: Concurrent requests.
        retry_wait_s: First backoff wait in seconds (doubles, at most 30 s).
        temperature: Sent with every request (None: none sent); a judge at another temperature than 0 keeps its
            verdicts apart in the cache (model key `"<model> temperature=<t>"`).

    Attributes:
        calls: HTTP requests sent (retries included).
        errors: Records whose call failed.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        cache: VerdictCache,
        api_key: str | None = None,
        timeout_s: float = 120.0,
        retries: int = 3,
        workers: int = 16,
        retry_wait_s: float = 1.0,
        temperature: float | None = 0.0,
    ) -> None:
        r"""Create the judge (arguments in the class docstring)."""
        super().__init__(base_url, model, api_key=api_key, timeout_s=timeout_s, retries=retries,
                         retry_wait_s=retry_wait_s, temperature=temperature)  # fmt: skip
        self.cache_model = model if temperature == 0.0 else f"{model} temperature={temperature}"
        self.cache = cache
        self.workers = max(1, int(workers))
        self.errors = 0

    def judge_one(self, question: str, answers: list[str], prediction: str | None, equivalent: bool) -> Verdict:
        r"""Verdict for one record (see the module docstring for the rule); never raises."""
        if prediction is None:
            return Verdict(False, "no_prediction")
        if equivalent:
            return Verdict(True, "rule")
        prompt = judge_prompt(question, answers, prediction)
        cached = self.cache.get(self.cache_model, prompt)
        if cached is not None:
            return Verdict(cached[1], "cache", cached[0])
        try:
            reply = self._ask(prompt)
        except JudgeError as err:
            with self._count_lock:
                self.errors += 1
            logger.warning("[agentic-eval] judge call failed: %s", err)
            return Verdict(None, "error", error=str(err))
        correct = reply_says_correct(reply)
        self.cache.put(self.cache_model, prompt, reply, correct)
        return Verdict(correct, "judge", reply)

    def judge_many(self, items: list[dict[str, Any]]) -> list[Verdict]:
        r"""Judge `items` (dicts with `question`, `answers`, `prediction`, `equivalent`) concurrently, in order.

        Items that would send the same prompt (e.g. the same prediction in several runs) share one call.
        """
        if not items:
            return []

        def ident(it: dict[str, Any]) -> tuple:
            return (it["question"], tuple(it["answers"]), it["prediction"], bool(it["equivalent"]))

        unique = list({ident(it): it for it in items}.values())
        with ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="agentic-judge") as pool:
            verdicts = list(
                pool.map(
                    lambda it: self.judge_one(it["question"], it["answers"], it["prediction"], it["equivalent"]),
                    unique,
                )
            )
        by_ident = {ident(it): v for it, v in zip(unique, verdicts)}
        return [by_ident[ident(it)] for it in items]
