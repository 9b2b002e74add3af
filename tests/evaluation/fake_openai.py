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

"""A local OpenAI-compatible server over real HTTP (stdlib `ThreadingHTTPServer` on 127.0.0.1).

It stands in for what cannot run here: a vLLM server hosting a trained policy (`POST /v1/completions` with token-id
prompts) and the judge model (`POST /v1/chat/completions`). The completions side follows vLLM's contract: the prompt
is a list of token ids, `stop` strings end the text right after the first one found (kept with
`include_stop_str_in_output`), `finish_reason` "stop" with `stop_reason` the stop string (None for end of turn),
"length" at `max_tokens`, `token_ids` returned when `return_token_ids` is true. What the "model" writes is a
function of the decoded context (`policy(context_text, body) -> reply text`, a reply ending in `<|im_end|>` is an
end of turn). The judge side answers with `judge(prompt) -> reply text` or an `(http_status, body)` tuple.
Every request body is recorded.

Run as a script it is a separate server process (`python tests/evaluation/fake_openai.py --tokenizer DIR --policy
sum|scripted --port N [--delay S]`): it prints `ready <url>` once it listens and serves until killed, so a test can
kill the model server in the middle of a run and start it again on the same port.
"""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler

from llamafactory_agentic.evaluation.endpoint import PROBE_USER
from llamafactory_agentic.testing import LoopbackServer, send_json


EOT = "<|im_end|>"


class FakeOpenAIServer(LoopbackServer):
    def __init__(self, tokenizer, policy=None, judge=None, delay_s=0.0, model="fake-policy", token_ids=True, port=0):
        self.tokenizer, self.policy, self.judge = tokenizer, policy, judge
        self.delay_s, self.model, self.token_ids = delay_s, model, token_ids
        self.completions, self.chats, self.probes, self.chat_bodies = [], [], [], []
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, status, payload):
                send_json(self, status, payload)

            def do_GET(self):
                if self.path.rstrip("/").endswith("/models"):
                    self._send(200, {"object": "list", "data": [{"id": server.model, "object": "model"}]})
                else:
                    self._send(404, {"error": "not found"})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path.endswith("/completions") and "/chat/" not in self.path:
                    self._send(*server._complete(body))
                elif self.path.endswith("/chat/completions"):
                    self._send(*server._chat(body))
                else:
                    self._send(404, {"error": "not found"})

        super().__init__(Handler, port)
        self.url = self.root + "/v1"

    def _chat_policy(self, body):
        """vLLM's chat contract with `continue_final_message`: the last assistant message is continued, not closed."""
        cont = bool(body.get("continue_final_message"))
        messages = body["messages"]
        text = ""
        for i, m in enumerate(messages):
            if cont and i == len(messages) - 1 and m["role"] == "assistant":
                text += f"<|im_start|>assistant\n{m['content']}"
            else:
                text += f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n"
        if not cont:
            text += "<|im_start|>assistant\n"
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        with self.lock:
            self.chat_bodies.append(body)
        status, data = self._complete({k: v for k, v in body.items() if k != "messages"} | {"prompt": ids})
        if status != 200:
            return status, data
        choice = dict(data["choices"][0])
        choice["message"] = {"role": "assistant", "content": choice.pop("text")}
        return 200, {**data, "object": "chat.completion", "choices": [choice]}

    def _complete(self, body):
        if body.get("user") == PROBE_USER:  # the harness's start-up check: kept apart, answered without the policy
            with self.lock:
                self.probes.append(body)
            choice = {"index": 0, "text": "Hi", "finish_reason": "length", "stop_reason": None}
            if body.get("return_token_ids") and self.token_ids:
                choice["token_ids"] = self.tokenizer.encode("Hi", add_special_tokens=False)[:1]
            return 200, {"id": "cmpl-probe", "object": "text_completion", "model": self.model, "choices": [choice]}
        with self.lock:
            self.completions.append(body)
        if self.delay_s:
            time.sleep(self.delay_s)
        prompt = body["prompt"]
        if not (isinstance(prompt, list) and all(isinstance(t, int) for t in prompt)):
            return 400, {"error": "this fake server only takes token-id prompts"}
        context = self.tokenizer.decode(prompt, skip_special_tokens=False)
        reply = self.policy(context, body)
        if isinstance(reply, tuple):
            return reply
        finish, stop_reason = "length", None
        hits = [(reply.find(s), s) for s in body.get("stop") or [] if s in reply]
        if hits:
            pos, stop = min(hits)
            reply, finish, stop_reason = reply[: pos + len(stop)], "stop", stop
        elif reply.endswith(EOT):
            reply, finish = reply[: -len(EOT)], "stop"
        ids = self.tokenizer.encode(reply, add_special_tokens=False)
        if len(ids) > body["max_tokens"]:
            ids, finish, stop_reason = ids[: body["max_tokens"]], "length", None
            reply = self.tokenizer.decode(ids)
        elif finish == "stop" and stop_reason is None:
            ids = ids + [self.tokenizer.convert_tokens_to_ids(EOT)]
        choice = {"index": 0, "text": reply, "finish_reason": finish, "stop_reason": stop_reason}
        if body.get("return_token_ids") and self.token_ids:
            choice["token_ids"] = ids
        return 200, {"id": "cmpl-1", "object": "text_completion", "model": self.model, "choices": [choice]}

    def _chat(self, body):
        if self.judge is None:  # the policy over chat: render the messages as Qwen's chat template does
            return self._chat_policy(body)
        with self.lock:
            self.chats.append(body)
        reply = self.judge(body["messages"][-1]["content"])
        if isinstance(reply, tuple):
            return reply
        message = {"role": "assistant", "content": reply}
        return 200, {"id": "chat-1", "object": "chat.completion", "choices": [{"index": 0, "message": message}]}


def main(argv=None):
    import argparse
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import helpers  # noqa: E402 (a plain module next to this file when run as a script)
    from transformers import AutoTokenizer

    parser = argparse.ArgumentParser(description="a fake OpenAI-compatible model server for the evaluation tests")
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--policy", choices=("sum", "scripted"), default="scripted")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--delay", type=float, default=0.0)
    args = parser.parse_args(argv)
    policy = helpers.sum_policy if args.policy == "sum" else helpers.scripted_policy()
    server = FakeOpenAIServer(
        AutoTokenizer.from_pretrained(args.tokenizer), policy, delay_s=args.delay, port=args.port
    )
    print(f"ready {server.url}", flush=True)
    server.httpd.serve_forever()


if __name__ == "__main__":
    main()
