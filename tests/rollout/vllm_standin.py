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

"""A stand-in for `vllm serve` on 127.0.0.1 (vLLM needs a GPU, which this machine lacks): real HTTP, a real model.

It decodes with a tiny local Hugging Face model (fp32, KV cache) and answers in the shapes vLLM 0.22.1's server uses
(read from its wheel: `entrypoints/openai/completion/serving.py`, `entrypoints/serve/*/api_router.py`):

* `GET /v1/models` (`id`, `root`, `max_model_len`), `POST /tokenize` (`tokens`);
* `POST /v1/completions` with a token-id prompt: `token_ids` with `return_token_ids`, `logprobs: k` as
  `{"token_logprobs", "top_logprobs", "tokens", "text_offset"}` (the sampled token first in each top dict, then the
  k best, keys `token_id:<id>` with `return_tokens_as_token_ids`), log-probs of the distribution sampled from
  (`processed_logprobs`: log_softmax(z / T)), `stop` strings kept with `include_stop_str_in_output`
  (`finish_reason` "stop", `stop_reason` the string), `stop_token_ids` and the tokenizer's EOS kept as the last
  token (`stop_reason` the id, None for EOS), "length" at `max_tokens`, per-request `seed`;
* with `dev_mode` (vLLM's `VLLM_SERVER_DEV_MODE=1`): `GET /server_info?config_format=json` (the vLLM config fields
  the engine reads), `POST /collective_rpc` with `reload_weights(weights_path=...)` (loads the folder's safetensors
  into the model), `POST /reset_prefix_cache`, and the weight-transfer routes `/init_weight_transfer_engine`,
  `/start_weight_update`, `/update_weights`, `/finish_weight_update`, `GET /get_world_size`, which are recorded (their
  data plane, NCCL or CUDA IPC, needs GPUs). Without dev mode those routes answer 404, as vLLM's do.

Every weight update is recorded in `updates` as `{"route", "version" (the `weight_version` query parameter),
"names"}`. Run as a script (`python tests/rollout/vllm_standin.py MODEL_DIR [--port N] [--no-dev-mode]
[--logprobs-mode M] [--weight-transfer B]`) it prints `ready <url>` and serves until killed, writing each update as a
JSON line to `--updates FILE`.
"""

import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import torch

from llamafactory_agentic.testing import LoopbackServer, send_json


class VLLMStandIn(LoopbackServer):
    def __init__(self, model_dir, *, port=0, dev_mode=True, logprobs_mode="processed_logprobs", max_logprobs=20,
                 max_model_len=4096, weight_transfer=None, served_name=None, updates_file=None):  # fmt: skip
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.model_dir = str(model_dir)
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_dir)
        self.model = AutoModelForCausalLM.from_pretrained(self.model_dir, dtype=torch.float32).eval()
        self.name = served_name or self.model_dir
        self.dev_mode, self.logprobs_mode, self.max_logprobs = dev_mode, logprobs_mode, max_logprobs
        self.max_model_len, self.weight_transfer = max_model_len, weight_transfer
        self.updates, self.completions, self.resets = [], [], 0
        self.updates_file = updates_file
        self.lock = threading.Lock()  # one decode or weight load at a time
        self.generator = torch.Generator().manual_seed(0)
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, status, payload):
                send_json(self, status, payload)

            def _route(self):
                parts = urllib.parse.urlsplit(self.path)
                return parts.path.rstrip("/"), dict(urllib.parse.parse_qsl(parts.query))

            def do_GET(self):
                path, query = self._route()
                self._send(*server.get(path, query))

            def do_POST(self):
                path, query = self._route()
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                try:
                    self._send(*server.post(path, query, body))
                except Exception as err:  # a 500 with the reason, as vLLM's server answers an engine error
                    self._send(500, {"error": f"{type(err).__name__}: {err}"})

        super().__init__(Handler, port)
        self.url = self.root + "/v1"

    # ------------------------------------------------------------------------------------------------ routes
    DEV_ROUTES = {"/server_info", "/collective_rpc", "/reset_prefix_cache", "/init_weight_transfer_engine",
                  "/start_weight_update", "/update_weights", "/finish_weight_update", "/get_world_size"}  # fmt: skip

    def get(self, path, query):
        if path in self.DEV_ROUTES and not self.dev_mode:
            return 404, {"detail": "Not Found"}
        if path == "/v1/models":
            entry = {"id": self.name, "object": "model", "root": self.model_dir, "max_model_len": self.max_model_len}
            return 200, {"object": "list", "data": [entry]}
        if path == "/server_info":
            model_config = {"logprobs_mode": self.logprobs_mode, "max_logprobs": self.max_logprobs,
                            "max_model_len": self.max_model_len, "dtype": "torch.float32"}  # fmt: skip
            transfer = {"backend": self.weight_transfer} if self.weight_transfer else None
            config = {"model_config": model_config, "cache_config": {"enable_prefix_caching": True},
                      "weight_transfer_config": transfer}  # fmt: skip
            return 200, {"vllm_config": config, "vllm_env": {}, "system_env": {}}
        if path == "/get_world_size":
            return 200, {"world_size": 1}
        return 404, {"detail": "Not Found"}

    def post(self, path, query, body):
        if path in self.DEV_ROUTES and not self.dev_mode:
            return 404, {"detail": "Not Found"}
        if path == "/v1/completions":
            return 200, self.complete(body)
        if path == "/tokenize":
            ids = self.tokenizer.encode(body["prompt"], add_special_tokens=bool(body.get("add_special_tokens", True)))
            return 200, {"count": len(ids), "max_model_len": self.max_model_len, "tokens": ids}
        if path == "/collective_rpc":
            if body.get("method") != "reload_weights":
                return 400, {"detail": f"this stand-in runs reload_weights only, not {body.get('method')!r}"}
            names = self.reload(body["kwargs"]["weights_path"])
            self._record("/collective_rpc", query, names)
            return 200, {"results": [None]}
        if path == "/reset_prefix_cache":
            self.resets += 1
            return 200, {}
        if path in ("/init_weight_transfer_engine", "/start_weight_update", "/finish_weight_update"):
            self._record(path, query, [], body)
            return 200, {"message": "ok"}
        if path == "/update_weights":
            self._record(path, query, list(body["update_info"]["names"]), body)
            return 200, {"message": "Weights updated"}
        return 404, {"detail": "Not Found"}

    def _record(self, route, query, names, body=None):
        version = query.get("weight_version")
        entry = {"route": route, "version": None if version is None else int(version), "names": names}
        if body is not None:
            entry["body"] = body
        with self.lock:
            self.updates.append(entry)
            if self.updates_file:
                with open(self.updates_file, "a", encoding="utf-8") as f:
                    f.write(json.dumps({k: v for k, v in entry.items() if k != "body"}) + "\n")

    # ------------------------------------------------------------------------------------------------ weights
    def reload(self, folder):
        from safetensors.torch import load_file

        tensors = {}
        for path in sorted(Path(folder).glob("*.safetensors")):
            tensors.update(load_file(str(path)))
        params = dict(self.model.named_parameters())
        unknown = [n for n in tensors if n not in params]
        if unknown:
            raise KeyError(f"weights of another model: {unknown[:3]}")
        with self.lock, torch.no_grad():
            for name, tensor in tensors.items():
                params[name].copy_(tensor.to(params[name].dtype))
        return sorted(tensors)

    # ------------------------------------------------------------------------------------------------ decoding
    def complete(self, body):
        prompt = [int(t) for t in body["prompt"]]
        temperature = float(body.get("temperature", 1.0))
        k = body.get("logprobs")
        as_ids = bool(body.get("return_tokens_as_token_ids"))
        stops = list(body.get("stop") or [])
        stop_ids = {int(t) for t in body.get("stop_token_ids") or []}
        eos = self.tokenizer.eos_token_id
        generator = self.generator if body.get("seed") is None else torch.Generator().manual_seed(int(body["seed"]))
        out, token_lps, tops = [], [], []
        finish, stop_reason, text = "length", None, ""
        with self.lock, torch.no_grad():
            self.completions.append(body)
            past, feed = None, torch.tensor([prompt])
            for _ in range(int(body["max_tokens"])):
                result = self.model(input_ids=feed, past_key_values=past, use_cache=True)
                past = result.past_key_values
                logits = result.logits[0, -1].float()
                logps = torch.log_softmax(logits / (temperature if temperature > 0 else 1.0), dim=-1)
                if temperature > 0:
                    token = int(torch.multinomial(logps.exp(), 1, generator=generator))
                else:
                    token = int(torch.argmax(logps))
                out.append(token)
                token_lps.append(float(logps[token]))
                if k is not None:
                    key = (lambda t: f"token_id:{t}") if as_ids else (lambda t: self.tokenizer.decode([t]))
                    top = {key(token): float(logps[token])}
                    for t in torch.topk(logps, int(k)).indices.tolist() if int(k) > 0 else []:
                        top.setdefault(key(t), float(logps[t]))
                    tops.append(top)
                feed = torch.tensor([[token]])
                if token in stop_ids or token == eos:
                    finish, stop_reason = "stop", (None if token == eos and token not in stop_ids else token)
                    text = self.tokenizer.decode(out[:-1], skip_special_tokens=False)
                    break
                text = self.tokenizer.decode(out, skip_special_tokens=False)
                hits = [(text.find(s), s) for s in stops if s in text]
                if hits:
                    pos, stop = min(hits)
                    text, finish, stop_reason = text[: pos + len(stop)], "stop", stop
                    break
        choice = {"index": 0, "text": text, "finish_reason": finish, "stop_reason": stop_reason}
        if body.get("return_token_ids"):
            choice["token_ids"] = out
        if k is not None:
            tokens = [f"token_id:{t}" if as_ids else self.tokenizer.decode([t]) for t in out]
            choice["logprobs"] = {"text_offset": list(range(len(out))), "token_logprobs": token_lps, "tokens": tokens,
                                  "top_logprobs": tops}  # fmt: skip
        return {"id": f"cmpl-{len(self.completions)}", "object": "text_completion", "model": self.name,
                "choices": [choice]}  # fmt: skip


def main(argv=None):
    import argparse

    parser = argparse.ArgumentParser(description="a stand-in for vllm serve (tests only)")
    parser.add_argument("model_dir")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--no-dev-mode", action="store_true")
    parser.add_argument("--logprobs-mode", default="processed_logprobs")
    parser.add_argument("--weight-transfer", default=None)
    parser.add_argument("--updates", default=None, help="append each weight update as a JSON line to this file")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    server = VLLMStandIn(args.model_dir, port=args.port, dev_mode=not args.no_dev_mode,
                         logprobs_mode=args.logprobs_mode, weight_transfer=args.weight_transfer,
                         updates_file=args.updates)  # fmt: skip
    print(f"ready {server.url}", flush=True)
    server.httpd.serve_forever()


if __name__ == "__main__":
    main()
