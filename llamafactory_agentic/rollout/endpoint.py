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

r"""A generation engine for models served elsewhere: OpenAI-compatible `POST {base_url}/completions`.

It plugs into the same agent loop as the in-process engines (`rollout.GenerationEngine`), so stop strings,
observations, tool limits and notices are exactly those of the `hf` and `vllm` backends. Each request sends the
context as token ids (`"prompt": [ids]`, prompt plus response so far), `max_tokens`, the sampling settings and the stop
strings with `include_stop_str_in_output: true`, and asks for the sampled ids (`return_token_ids: true`, vLLM >= 0.10.2;
`skip_special_tokens: false`). Extensions outside OpenAI's API (`repetition_penalty`, `top_k`, `stop_token_ids`,
`include_stop_str_in_output`, `return_token_ids`, `skip_special_tokens`) are those vLLM and SGLang servers accept.

When the server returns token ids they are used as they are; otherwise the returned text is encoded with the
tokenizer (`add_special_tokens=False`) and the engine counts it in `stats["retokenised"]`. A request that still fails
after its retries becomes a round with finish reason `error` (the trajectory ends; the record says why).
With several servers each request goes to the one with the fewest recent failures, then the fewest requests in
flight; a failed attempt is retried at once on another server not yet tried for that request (a server that keeps
failing is avoided by later requests until it answers again), and only with backoff once every server was tried.

Outbound limits (`common/outbound.py`, docs/tools.md "Outbound limits"): every request (probes included) ends within
`timeout_s` (`eval_request_timeout`), connection, headers and body together, so a server that trickles is cut off;
a reply body is read to `MAX_RESPONSE_BYTES` (64 MiB) at most; redirects are not followed.

`check_endpoints` (run at start with `check=True`) asks every server `GET /models` and one tiny completion (1 token,
`user` = `PROBE_USER`), logs what it supports (models, completions, token ids back or re-encoding) and refuses a
server that cannot be reached or serves no `/completions` (naming what it serves instead).
"""

import hashlib
import json
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from tenacity import RetryError, retry, retry_if_exception, stop_after_attempt, wait_exponential

from ..common import outbound
from ..common.log import get_logger
from ..rewards.judge import open_sqlite_cache, retryable_http_error
from .engine import GenerationEngine, GenerationRequest, GenerationResult, SamplingSettings


logger = get_logger(__name__)


PROBE_USER = "llamafactory-agentic-probe"
MAX_RESPONSE_BYTES = 64 << 20  # most bytes of a server reply read (common/outbound.py)


class EndpointError(RuntimeError):
    r"""A generation server cannot serve this evaluation (unreachable, or no `/completions`); the message says why."""


class ResponseCache:
    r"""SQLite cache of server replies keyed by the request (SHA-256 of the endpoint path and the canonical JSON body).

    Only deterministic requests are cached (a `seed`, or temperature 0): the same request then gets the same reply
    from the server, so a run that asks again (a new output folder, a new judge or metric) costs no generation.

    Args:
        path: The database file (created with its folder).
    """

    def __init__(self, path: str | os.PathLike) -> None:
        r"""Open (or create) the cache file."""
        self.path, self._lock, self._conn = open_sqlite_cache(
            path, "CREATE TABLE IF NOT EXISTS replies (key TEXT PRIMARY KEY, reply TEXT)"
        )
        self.hits = 0

    @staticmethod
    def key(path: str, body: dict[str, Any]) -> str:
        r"""SHA-256 of the endpoint path and the body's canonical JSON."""
        return hashlib.sha256((path + "\n" + json.dumps(body, sort_keys=True)).encode()).hexdigest()

    def get(self, path: str, body: dict[str, Any]) -> dict[str, Any] | None:
        r"""The cached reply, or None."""
        with self._lock:
            row = self._conn.execute("SELECT reply FROM replies WHERE key = ?", (self.key(path, body),)).fetchone()
            if row is not None:
                self.hits += 1
        return None if row is None else json.loads(row[0])

    def put(self, path: str, body: dict[str, Any], reply: dict[str, Any]) -> None:
        r"""Store a reply (an existing one is kept)."""
        with self._lock:
            self._conn.execute(
                "INSERT OR IGNORE INTO replies VALUES (?, ?)", (self.key(path, body), json.dumps(reply))
            )
            self._conn.commit()

    def close(self) -> None:
        r"""Close the connection."""
        with self._lock:
            self._conn.close()


class OpenAICompletionsEngine(GenerationEngine):
    r"""Round generation through one or more OpenAI-compatible completions servers.

    Args:
        base_urls: Server URLs ending in `/v1` (a request goes to `{url}/completions`).
        tokenizer: The served model's tokenizer (encodes text replies when no ids come back).
        model: Served model name (None: the first id of `GET {url}/models` of the first server).
        api_key: Bearer token (None: no Authorization header).
        timeout_s: Seconds per request, whole (connection, headers and body; `eval_request_timeout`).
        retries: Attempts per request (HTTP 5xx, 429, network errors and timeouts; the next healthy server first,
            then exponential backoff).
        workers: Concurrent requests.
        retry_wait_s: First backoff wait in seconds.
        check: Run `check_endpoints` now (raises `EndpointError`).
        cache: A `ResponseCache` for deterministic requests (None: no cache).

    Attributes:
        stats: `requests`, `errors`, `retokenised` (replies without token ids), `generated_tokens`.
        last_bodies: The JSON body of the latest request per server URL (inspection and tests).

    Raises:
        ValueError: no URL given.
        RuntimeError: `model` is None and the first server lists no model.
        EndpointError: `check` found a server it cannot use.
    """

    def __init__(
        self,
        base_urls: Sequence[str],
        tokenizer: Any,
        model: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 600.0,
        retries: int = 3,
        workers: int = 64,
        retry_wait_s: float = 1.0,
        check: bool = False,
        cache: ResponseCache | None = None,
    ) -> None:
        r"""Create the engine (arguments in the class docstring)."""
        self.cache = cache
        self.urls = [url.rstrip("/") for url in base_urls]
        if not self.urls:
            raise ValueError("OpenAICompletionsEngine needs at least one base URL")
        self.tokenizer = tokenizer
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = outbound.outbound_client(headers=headers, max_connections=max(1, int(workers)))
        self.timeout_s = float(timeout_s)
        self._pool = ThreadPoolExecutor(max_workers=max(1, int(workers)), thread_name_prefix="agentic-endpoint")
        self._retries = max(1, int(retries))
        self._wait = float(retry_wait_s)
        self._lock = threading.Lock()
        self._inflight = dict.fromkeys(self.urls, 0)
        self._failures = dict.fromkeys(self.urls, 0)  # consecutive failed attempts per server (0 after an answer)
        self._down_until = dict.fromkeys(self.urls, 0.0)  # monotonic time before which a failing server is avoided
        self.stats = {"requests": 0, "errors": 0, "retokenised": 0, "generated_tokens": 0}
        self.last_bodies: dict[str, dict] = {}
        self.capabilities: dict[str, dict[str, Any]] = {}
        if check:
            self.capabilities = self.check_endpoints(model)
        self.model = model or self._first_model()

    def _retrying(self, fn: Any) -> Any:
        return retry(
            retry=retry_if_exception(retryable_http_error),
            stop=stop_after_attempt(self._retries),
            wait=wait_exponential(multiplier=self._wait, max=30),
            reraise=True,
        )(fn)

    def _http(self, method: str, url: str, json: Any = None) -> httpx.Response:
        r"""One request that ends within `timeout_s` and reads at most `MAX_RESPONSE_BYTES` (an httpx response)."""
        fetched = outbound.fetch(self._client, method, url, json=json, deadline_s=self.timeout_s,
                                 max_bytes=MAX_RESPONSE_BYTES)  # fmt: skip
        return fetched.response()

    def _get(self, url: str) -> httpx.Response:
        return self._http("GET", url)

    def _send(self, url: str, json: Any) -> httpx.Response:
        return self._http("POST", url, json=json)

    def _first_model(self) -> str:
        response = self._retrying(self._get)(self.urls[0] + "/models")
        response.raise_for_status()
        models = response.json().get("data") or []
        if not models:
            raise RuntimeError(f"{self.urls[0]}/models lists no model; set eval_model_name")
        return str(models[0]["id"])

    def check_endpoints(self, model: str | None) -> dict[str, dict[str, Any]]:
        r"""Ask every server what it supports and log it; refuse one this engine cannot use.

        Per server: `GET /models`, then one completion of 1 token from a token-id prompt (`user` = `PROBE_USER`);
        when `/completions` is missing, `POST /chat/completions` tells whether the server serves chat only.

        Args:
            model: The served model name to check (None: the first listed).

        Returns:
            `{url: {"models": [...], "completions": bool, "token_ids": bool, "chat": bool | None}}`.

        Raises:
            EndpointError: a server cannot be reached after the retries, or serves no `/completions`.
        """
        found: dict[str, dict[str, Any]] = {}
        for url in self.urls:
            info: dict[str, Any] = {"models": [], "completions": False, "token_ids": False, "chat": None}
            try:
                response = self._retrying(self._get)(url + "/models")
                if response.is_success:
                    info["models"] = [str(m.get("id")) for m in (response.json().get("data") or [])]
                name = model or (info["models"][0] if info["models"] else "default")
                body = {"model": name, **self._probe_body(), "max_tokens": 1, "temperature": 0.0,
                        "return_token_ids": True, "user": PROBE_USER}  # fmt: skip
                response = self._retrying(self._send)(url + self.PATH, body)
            except (httpx.TransportError, httpx.TimeoutException) as err:
                raise EndpointError(
                    f"{url} cannot be reached ({type(err).__name__}: {err}) after {self._retries} attempts: "
                    f"{self.UNREACHABLE_HINT}"
                ) from None
            except httpx.HTTPStatusError as err:
                raise EndpointError(f"{url}: {err}") from None
            self._refuse(url, name, response)
            try:
                choice = response.json()["choices"][0]
                self._choice_text(choice)
            except (ValueError, KeyError, IndexError, TypeError):
                raise EndpointError(f"{url}{self.PATH} answers no completion: {response.text[:300]!r}") from None
            info["completions"] = True
            info["token_ids"] = choice.get("token_ids") is not None
            if model is not None and info["models"] and model not in info["models"]:
                logger.warning("[agentic-eval] %s/models does not list %r (it lists %s)", url, model, info["models"])
            logger.info(
                "[agentic-eval] endpoint %s: models %s; %s answers; %s",
                url,
                info["models"] or "(none listed)",
                self.PATH,
                "token ids come back (used as they are)"
                if info["token_ids"]
                else "no token ids come back: replies are re-encoded with the tokenizer (stats['retokenised'])",
            )
            found[url] = info
        return found

    def _probe_body(self) -> dict[str, Any]:
        ids = self.tokenizer.encode("Hello", add_special_tokens=False) or [0]
        return {"prompt": [int(t) for t in ids]}

    def _refuse(self, url: str, name: str, response: httpx.Response) -> None:
        r"""Raise `EndpointError` when the probe's reply shows this engine cannot use the server."""
        if response.status_code in (404, 405):
            chat = self._send(
                url + "/chat/completions",
                {"model": name, "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 1},
            )
            serves = "serves chat completions only" if chat.is_success else "serves neither completions nor chat"
            hint = " Set eval_api: chat to use /chat/completions." if chat.is_success else ""
            raise EndpointError(f"{url}/completions answers HTTP {response.status_code}: the server {serves}.{hint}")
        if not response.is_success:
            raise EndpointError(f"{url}{self.PATH} answers HTTP {response.status_code}: {response.text[:300]}")

    def _pick(self, avoid: Sequence[str] = ()) -> str:
        r"""The server for the next attempt (counted in flight until `_release`).

        Not in `avoid` when one is left; among those, one that has not failed recently (a server whose attempt
        failed is avoided for 2^(failures-1) seconds, at most 30), then the fewest requests in flight.
        """
        now = time.monotonic()
        with self._lock:
            candidates = [u for u in self.urls if u not in avoid] or self.urls
            url = min(candidates, key=lambda u: (self._down_until[u] > now, self._inflight[u]))
            self._inflight[url] += 1
            return url

    def _release(self, url: str, failed: bool) -> None:
        with self._lock:
            self._inflight[url] -= 1
            self._failures[url] = self._failures[url] + 1 if failed else 0
            self._down_until[url] = time.monotonic() + min(30.0, 2.0 ** (self._failures[url] - 1)) if failed else 0.0

    def _body(self, req: GenerationRequest, sampling: SamplingSettings) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": [int(t) for t in list(req.prompt_ids) + list(req.response_ids)],
            "max_tokens": int(req.max_tokens),
            "temperature": float(max(sampling.temperature, 0.0)),
            "top_p": float(sampling.top_p),
            "n": 1,
            "stop": list(sampling.stop_strings),
            "stop_token_ids": [int(t) for t in sampling.eos_token_ids],
            "include_stop_str_in_output": True,
            "skip_special_tokens": False,
            "return_token_ids": True,
        }
        if sampling.top_k and sampling.top_k > 0:
            body["top_k"] = int(sampling.top_k)
        if sampling.repetition_penalty != 1.0:
            body["repetition_penalty"] = float(sampling.repetition_penalty)
        if req.seed is not None:
            body["seed"] = int(req.seed)
        return body

    PATH = "/completions"
    UNREACHABLE_HINT = "start the server or fix eval_base_url"

    def _post(self, url: str, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self.stats["requests"] += 1
            self.last_bodies[url] = body
        response = self._send(url + self.PATH, body)
        response.raise_for_status()
        return response.json()

    def _cacheable(self, body: dict[str, Any]) -> bool:
        return self.cache is not None and (body.get("seed") is not None or not body.get("temperature"))

    def _one(self, req: GenerationRequest, sampling: SamplingSettings) -> GenerationResult:
        body = self._body(req, sampling)
        tried: list[str] = []

        def attempt() -> dict[str, Any]:
            url = self._pick(avoid=tried)
            tried.append(url)
            try:
                data = self._post(url, body)
            except BaseException as err:
                self._release(url, failed=retryable_http_error(err))  # a 4xx is the request's fault, not the server's
                raise
            self._release(url, failed=False)
            return data

        def wait(state: Any) -> float:  # another server not tried yet for this request: at once
            if len(set(tried)) < len(self.urls):
                return 0.0
            return wait_exponential(multiplier=self._wait, max=30)(state)

        call = retry(
            retry=retry_if_exception(retryable_http_error),
            stop=stop_after_attempt(self._retries),
            wait=wait,
            reraise=False,
        )(attempt)
        try:
            cached = self.cache.get(self.PATH, body) if self._cacheable(body) else None
            if cached is not None:
                return self._parse(cached, sampling)
            data = call()
            result = self._parse(data, sampling)
            if self._cacheable(body):
                self.cache.put(self.PATH, body, data)
            return result
        except RetryError as err:
            last = err.last_attempt.exception()
            return self._error(f"{tried[-1]}: {type(last).__name__}: {last} (after {self._retries} attempts on "
                               f"{', '.join(dict.fromkeys(tried))})")  # fmt: skip
        except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as err:
            return self._error(f"{tried[-1] if tried else self.urls[0]}: {type(err).__name__}: {err}")

    def _error(self, message: str) -> GenerationResult:
        with self._lock:
            self.stats["errors"] += 1
        logger.warning("[agentic-eval] generation request failed: %s", message)
        return GenerationResult(token_ids=[], finish_reason="error", error=message)

    def _choice_text(self, choice: dict[str, Any]) -> str:
        text = choice.get("text")
        if not isinstance(text, str):
            raise ValueError(f"not a completion choice: {str(choice)[:200]}")
        return text

    def _parse(self, data: dict[str, Any], sampling: SamplingSettings) -> GenerationResult:
        choice = data["choices"][0]
        text = self._choice_text(choice)
        ids = choice.get("token_ids")
        finish = choice.get("finish_reason")
        stop_reason = choice.get("stop_reason")
        ends = [(text.find(s) + len(s), s) for s in sampling.stop_strings if s in text]
        if ends and min(ends)[0] < len(text):
            # text past a stop string: the server ignored `stop` (LLaMA-Factory's hf engine warns and generates on);
            # cut where a server honouring it would have stopped, and encode what is left
            end, stop_reason = min(ends)
            text, ids, finish = text[:end], None, "stop"
        if ids is None:
            ids = self.tokenizer.encode(text, add_special_tokens=False)
            with self._lock:
                self.stats["retokenised"] += 1
        ids = [int(t) for t in ids]
        eos = [int(t) for t in sampling.eos_token_ids]
        if finish == "stop":
            stop = stop_reason if isinstance(stop_reason, str) and stop_reason in sampling.stop_strings else None
            if stop is None:
                stop = next((s for s in sampling.stop_strings if text.endswith(s)), None)
            if stop is not None:
                result = GenerationResult(token_ids=ids, finish_reason="stop", stop_string=stop)
            else:  # end of turn (stop_reason None) or a stop token id
                if eos and (not ids or ids[-1] not in eos):
                    ids.append(int(stop_reason) if isinstance(stop_reason, int) else eos[0])
                result = GenerationResult(token_ids=ids, finish_reason="eos")
        else:
            result = GenerationResult(token_ids=ids, finish_reason="length")
        with self._lock:
            self.stats["generated_tokens"] += len(result.token_ids)
        return result

    def generate(self, requests: list[GenerationRequest], sampling: SamplingSettings) -> list[GenerationResult]:
        r"""One round for every request, sent concurrently; results in request order (see the class docstring)."""
        results: list[GenerationResult | None] = [None] * len(requests)
        futures = {}
        for i, req in enumerate(requests):
            if req.max_tokens <= 0:
                results[i] = GenerationResult(token_ids=[], finish_reason="length")
            else:
                futures[i] = self._pool.submit(self._one, req, sampling)
        for i, future in futures.items():
            results[i] = future.result()
        return results

    def release(self) -> None:
        r"""Nothing to free between calls (the servers keep their own state)."""

    def close(self) -> None:
        r"""Stop the worker threads and close the HTTP client (and the response cache)."""
        self._pool.shutdown(wait=True)
        self._client.close()
        if self.cache is not None:
            self.cache.close()


class OpenAIChatEngine(OpenAICompletionsEngine):
    r"""Round generation through OpenAI-compatible chat servers (`POST {base_url}/chat/completions`).

    The agent loop stays client-side, in one of two modes chosen by the run's tool-call format:

    * **continue** (`tool_format` None: ARPO's inline tags): each round sends the sample's chat messages and, after the
      first round, the response so far as a final assistant message to be continued (`continue_final_message: true`,
      `add_generation_prompt: false`, as vLLM and SGLang accept), so the server renders the same context as training's
      inline format (observations inside the assistant turn). A server that cannot continue an assistant message
      (LLaMA-Factory's `llamafactory-cli api` takes only u/a/u/.../u conversations) is refused by `check_endpoints`.
    * **turns** (`tool_format` a `NativeToolFormat`: `agentic_tool_protocol: template`): every model turn is an
      assistant message (its text as the server returned it, tool calls included) and every observation a `tool`
      message, so a server that renders messages with the model's chat template takes the conversation:
      LLaMA-Factory's API (`llamafactory-cli api`), `vllm serve` (not an API that demands `tool_calls` ids on the
      assistant message and a matching `tool_call_id`, as OpenAI's hosted one). No `tools` list is sent (the
      in-process evaluation renders its prompts without one either), so the reply's text is the model's whole turn.
      The template's tool message is what the in-process loop inserts, so on the same model and greedy decoding the
      trajectories are the in-process ones; they differ where the server's text does not re-encode to the sampled
      ids (LLaMA-Factory returns text only, decoded with `skip_special_tokens` and `clean_up_tokenization_spaces`;
      `stats["retokenised"]` counts the replies re-encoded).
      LLaMA-Factory's API reads `presence_penalty` as its repetition penalty; when the start-up check recognises it
      (its `Only supports u/a/u/a/u...` answer to a continued assistant message) the repetition penalty is sent there.

    Sampling, stop strings, seeds, token ids, caching and retries are those of `OpenAICompletionsEngine`. The runner
    registers each prompt's messages (`register_prompt`) before the loop starts.

    Args:
        *args: As `OpenAICompletionsEngine`.
        tool_format: The run's `rollout.tool_format.NativeToolFormat` for the turns mode; None: continue mode.
        **kwargs: As `OpenAICompletionsEngine`.
    """

    PATH = "/chat/completions"
    LLAMAFACTORY_REFUSAL = "Only supports u/a/u/a/u"  # LLaMA-Factory's API answer to a continued assistant message

    def __init__(self, *args: Any, tool_format: Any = None, **kwargs: Any) -> None:
        r"""Create the engine (arguments in the class docstring)."""
        self._messages: dict[tuple[int, ...], list[dict[str, str]]] = {}
        self.tool_format = tool_format
        self.turns = tool_format is not None and bool(getattr(tool_format, "calls_end_turn", False))
        self.presence_as_repetition = False
        # turns mode: per engine key, the model turns of the response so far as (start, end, text) in response ids
        self._turns: dict[int, list[tuple[int, int, str]]] = {}
        super().__init__(*args, **kwargs)

    def register_prompt(self, prompt_ids: Sequence[int], messages: list[dict[str, str]], system: str | None) -> None:
        r"""Remember the chat messages (system first when given) that `prompt_ids` were rendered from."""
        head = [{"role": "system", "content": system}] if system else []
        self._messages[tuple(int(t) for t in prompt_ids)] = head + [dict(m) for m in messages]

    def _body(self, req: GenerationRequest, sampling: SamplingSettings) -> dict[str, Any]:
        body = super()._body(req, sampling)
        messages = self._messages.get(tuple(int(t) for t in req.prompt_ids))
        if messages is None:
            raise KeyError("no chat messages registered for this prompt (OpenAIChatEngine.register_prompt)")
        body.pop("prompt")
        body["messages"] = list(messages)
        if self.turns:
            body["messages"] += self._turn_messages(req)
            if not body["stop"]:
                body.pop("stop")  # calls end the turn; LLaMA-Factory warns on every request that names `stop`
            if self.presence_as_repetition and "repetition_penalty" in body:
                body["presence_penalty"] = body["repetition_penalty"]
        elif req.response_ids:
            text = self.tokenizer.decode(list(req.response_ids), skip_special_tokens=False)
            body["messages"].append({"role": "assistant", "content": text})
            body.update(continue_final_message=True, add_generation_prompt=False)
        return body

    def _turn_messages(self, req: GenerationRequest) -> list[dict[str, str]]:
        r"""The assistant and tool messages of a response so far (turns mode).

        Raises:
            ValueError: the response has ids this engine did not return and that are not the template's tool message
                around a text (the trajectory then ends with finish reason `error`).
        """
        with self._lock:
            turns = list(self._turns.get(req.key, ()))
        ids = [int(t) for t in req.response_ids]
        out: list[dict[str, str]] = []
        position = 0
        for start, end, text in turns:
            if start > position:
                out.append({"role": "tool", "content": self._observation_text(ids[position:start])})
            out.append({"role": "assistant", "content": text})
            position = end
        if len(ids) > position:
            out.append({"role": "tool", "content": self._observation_text(ids[position:])})
        return out

    def _observation_text(self, ids: list[int]) -> str:
        fmt = self.tool_format
        text = self.tokenizer.decode(ids, skip_special_tokens=False)
        tail = fmt.suffix + (
            self.tokenizer.decode(fmt.thought_ids, skip_special_tokens=False) if fmt.thought_ids else ""
        )
        if not (text.startswith(fmt.prefix) and text.endswith(tail) and len(text) >= len(fmt.prefix) + len(tail)):
            raise ValueError(
                f"response ids between two model turns do not decode to the template's tool message: {text[:200]!r}"
            )
        return text[len(fmt.prefix) : len(text) - len(tail)]

    def _one(self, req: GenerationRequest, sampling: SamplingSettings) -> GenerationResult:
        try:
            self._body(req, sampling)
        except (KeyError, ValueError) as err:
            return self._error(str(err).strip("'\""))
        result = super()._one(req, sampling)
        if self.turns and result.finish_reason != "error":
            ids = list(result.token_ids)
            eos = {int(t) for t in sampling.eos_token_ids}
            text = self.tokenizer.decode(ids[:-1] if ids and ids[-1] in eos else ids, skip_special_tokens=False)
            start = len(req.response_ids)
            with self._lock:
                self._turns.setdefault(req.key, []).append((start, start + len(ids), text))
        return result

    def reset(self) -> None:
        r"""Forget the model turns of every trajectory (a new rollout call)."""
        with self._lock:
            self._turns.clear()

    def finish(self, keys: Sequence[int]) -> None:
        r"""Forget the model turns of these trajectories."""
        with self._lock:
            for key in keys:
                self._turns.pop(int(key), None)

    def check_endpoints(self, model: str | None) -> dict[str, dict[str, Any]]:
        r"""`OpenAICompletionsEngine.check_endpoints`, plus in turns mode whether a server is LLaMA-Factory's API.

        Returns:
            As `OpenAICompletionsEngine.check_endpoints`, with `"llamafactory": bool` per server in turns mode.

        Raises:
            EndpointError: as `OpenAICompletionsEngine.check_endpoints`.
        """
        found = super().check_endpoints(model)
        if self.turns:
            for url, info in found.items():
                name = model or (info["models"][0] if info["models"] else "default")
                body = {"model": name, **self._continue_probe(), "max_tokens": 1, "user": PROBE_USER}
                try:
                    response = self._send(url + self.PATH, body)
                except httpx.HTTPError:
                    response = None
                info["llamafactory"] = bool(
                    response is not None and response.status_code == 400 and self.LLAMAFACTORY_REFUSAL in response.text
                )
            if any(info["llamafactory"] for info in found.values()):
                self.presence_as_repetition = True
                logger.info(
                    "[agentic-eval] LLaMA-Factory's API: the repetition penalty is sent as presence_penalty (which it "
                    "reads as its repetition penalty); it takes no seed, so sampled runs are not reproducible there"
                )
        return found

    @staticmethod
    def _continue_probe() -> dict[str, Any]:
        messages = [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi"}]
        return {"messages": messages, "continue_final_message": True, "add_generation_prompt": False}

    def _probe_body(self) -> dict[str, Any]:
        if self.turns:
            return {"messages": [{"role": "user", "content": "Hello"}]}
        return self._continue_probe()

    def _refuse(self, url: str, name: str, response: httpx.Response) -> None:
        if response.status_code in (404, 405):
            raise EndpointError(f"{url}/chat/completions answers HTTP {response.status_code}: no chat endpoint there")
        if not response.is_success and self.turns:
            raise EndpointError(f"{url}/chat/completions answers HTTP {response.status_code}: {response.text[:300]}")
        if not response.is_success:
            raise EndpointError(
                f"{url}/chat/completions cannot continue an assistant message (HTTP {response.status_code}: "
                f"{response.text[:200]}). The tool loop needs it to give the model the training context "
                "(observations inside the assistant turn): LLaMA-Factory's `llamafactory-cli api` takes only "
                "u/a/u/.../u conversations. Serve the model with vLLM (`vllm serve`, chat or completions) or SGLang, "
                "or, for a model trained with the template's own tool calls, set agentic_tool_protocol: template "
                "(each model turn and each observation is then a message of its own, which LLaMA-Factory's API takes)."
            )

    def _choice_text(self, choice: dict[str, Any]) -> str:
        message = choice.get("message") or {}
        text = message.get("content")
        calls = message.get("tool_calls")
        if self.turns and calls and isinstance(calls, list):  # a server that parsed the calls: the template's text
            from llamafactory.data.tool_utils import FunctionCall

            functions = [FunctionCall(c["function"]["name"], c["function"]["arguments"]) for c in calls]
            text = (text or "") + self.tool_format.tool_utils.function_formatter(functions)
        if not isinstance(text, str):
            raise ValueError(f"not a chat completion choice: {str(choice)[:200]}")
        return text
