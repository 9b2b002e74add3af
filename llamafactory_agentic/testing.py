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

"""Tiny local models for tests, the README's demo run and CPU smoke runs (no model hub needed).

`build_tiny_model(path)` trains a byte-level BPE tokenizer in-process on a small corpus (tag words and text in the style
of the ARPO data) and saves it with a randomly initialised 2-layer Qwen2 model whose chat special tokens match
LLaMA-Factory's `qwen` template (`<|im_start|>`, `<|im_end|>`, `<|endoftext|>`). The tool tags (`<search>`,
`<python>`, `<result>`, ...) are ordinary text, as in the real Qwen tokenizers.

`build_tiny_tokenizer(path, chat_format)` builds only the tokenizer, in the token layout of a model family: `qwen`
(as above), `qwen3` (plus Qwen3's ordinary added tokens `<think>`, `</think>`, `<tool_call>`, ...) or `llama3` (Llama 3
Instruct's special tokens `<|begin_of_text|>`, `<|start_header_id|>`, `<|end_header_id|>`, `<|eot_id|>`, ... with
BOS `<|begin_of_text|>` and EOS `<|eot_id|>`), for tests of LLaMA-Factory's `qwen`, `qwen3` and `llama3` templates.
"""

import json
import os
from pathlib import Path
from typing import Any


SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# per chat format: special tokens (in id order), those listed as additional special tokens, ordinary added tokens, and
# the tokenizer's bos / eos / pad
CHAT_FORMATS = {
    "qwen": {
        "special": SPECIAL_TOKENS,
        "additional": ["<|im_start|>", "<|im_end|>"],
        "added": [],
        "bos": None,
        "eos": "<|im_end|>",
        "pad": "<|endoftext|>",
    },
    "qwen3": {
        "special": SPECIAL_TOKENS,
        "additional": ["<|im_start|>", "<|im_end|>"],
        "added": ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"],
        "bos": None,
        "eos": "<|im_end|>",
        "pad": "<|endoftext|>",
    },
    "llama3": {
        "special": [
            "<|begin_of_text|>",
            "<|end_of_text|>",
            "<|start_header_id|>",
            "<|end_header_id|>",
            "<|eot_id|>",
            "<|eom_id|>",
            "<|python_tag|>",
        ],
        "additional": ["<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|python_tag|>"],
        "added": [],
        "bos": "<|begin_of_text|>",
        "eos": "<|eot_id|>",
        "pad": None,
    },
}

_CORPUS_LINES = [
    "You are a helpful assistant that answers step by step and may use a search tool and a Python interpreter.",
    "<think> Let me think about the question. </think>",
    "<search> capital of France </search> <result>\nPage 1: Paris is the capital of France.\n</result>",
    "<python> print(1 + 2) </python> <result>\n3\n</result>",
    "<answer> The final answer is \\[ \\boxed{42} \\] </answer>",
    "What is the sum of the first 10 positive integers? The answer is 55.",
    "Who wrote the novel? The author was born in 1900 and died in 1980 in London, England.",
    "def f(x):\n    return x * x\nprint(f(3))",
    "import math\nprint(math.sqrt(16))",
    "Page 1: The quick brown fox jumps over the lazy dog.\nPage 2: A second result snippet about history.",
    "user assistant system tool observation function",
    "0 1 2 3 4 5 6 7 8 9 10 100 1000 + - * / = ( ) [ ] { } < > , . ; : ! ? ' \" \\",
]


def _corpus(extra: list[str] | None = None) -> list[str]:
    lines = list(_CORPUS_LINES)
    if extra:
        lines.extend(extra)
    return lines * 20


def build_tiny_tokenizer(
    output_dir: str | os.PathLike | None = None,
    chat_format: str = "qwen",
    vocab_size: int = 1024,
    extra_corpus: list[str] | None = None,
    digits: str = "bytes",
):
    r"""Train a byte-level BPE tokenizer in-process whose special tokens follow one model family (no model hub).

    Args:
        output_dir: Where to save it (`save_pretrained`); None keeps it in memory only.
        chat_format: `qwen`, `qwen3` or `llama3` (see `CHAT_FORMATS`).
        vocab_size: Target BPE vocabulary size (tokens), special tokens included.
        extra_corpus: Extra text lines for the training corpus.
        digits: How numbers are pre-tokenized before BPE: `bytes` (like any text), `individual` (every digit its own
            token, as Qwen's tokenizer does) or `pairs` (chunks of up to two digits from the left, in the way Llama 3's
            tokenizer cuts numbers into chunks of up to three: `4817` is `48` `17` wherever it stands; every chunk is
            in the vocabulary).

    Returns:
        The `PreTrainedTokenizerFast` (right padding; the tool tags are ordinary text, Qwen3's `<think>` pair an
        ordinary added token as in the real Qwen3 tokenizers).

    Raises:
        KeyError: for an unknown `chat_format`.
        ValueError: for an unknown `digits`.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    layout = CHAT_FORMATS[chat_format]
    tokenizer = Tokenizer(models.BPE())
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False)
    if digits == "bytes":
        tokenizer.pre_tokenizer = byte_level
    elif digits == "individual":
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    elif digits == "pairs":
        chunks = pre_tokenizers.Split(Regex(r"\d{1,2}"), behavior="isolated")
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence([chunks, byte_level])
        # every two-digit chunk becomes one token
        extra_corpus = list(extra_corpus or []) + [" ".join(f"{i:02d}" for i in range(100))] * 5
    else:
        raise ValueError(f"digits must be bytes, individual or pairs, got {digits!r}")
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=layout["special"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus(extra_corpus), trainer=trainer)
    if layout["bos"] is not None:  # Llama 3 prepends BOS when special tokens are added
        bos_id = tokenizer.token_to_id(layout["bos"])
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{layout['bos']} $A",
            pair=f"{layout['bos']} $A {layout['bos']} $B",
            special_tokens=[(layout["bos"], bos_id)],
        )

    named = {f"{key}_token": layout[key] for key in ("bos", "eos", "pad") if layout[key] is not None}
    hf_tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        **named,
        additional_special_tokens=layout["additional"],
        clean_up_tokenization_spaces=False,
    )
    if layout["added"]:
        hf_tokenizer.add_tokens(layout["added"])
    hf_tokenizer.padding_side = "right"
    if output_dir is not None:
        Path(output_dir).mkdir(parents=True, exist_ok=True)
        hf_tokenizer.save_pretrained(str(output_dir))
    return hf_tokenizer


def build_tiny_model(
    output_dir: str | os.PathLike,
    vocab_size: int = 1024,
    hidden_size: int = 64,
    num_layers: int = 2,
    seed: int = 0,
    extra_corpus: list[str] | None = None,
    intermediate_size: int | None = None,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    digits: str = "bytes",
) -> Path:
    r"""Build and save a tiny Qwen2-architecture causal LM with a locally trained tokenizer.

    Args:
        output_dir: Directory to write `config.json`, the weights and the tokenizer files into.
        vocab_size: Target BPE vocabulary size (tokens), special tokens included.
        hidden_size: Model width.
        num_layers: Number of decoder layers.
        seed: Seed of the random weight initialisation.
        extra_corpus: Extra text lines for the tokenizer's training corpus.
        intermediate_size: Width of the MLP (default `2 * hidden_size`).
        num_heads: Attention heads (query).
        num_kv_heads: Key/value heads (grouped-query attention).
        digits: How numbers are pre-tokenized before BPE (see `build_tiny_tokenizer`).

    Returns:
        The output directory, loadable with `AutoTokenizer`/`AutoModelForCausalLM.from_pretrained` and LLaMA-Factory's
        `model_name_or_path` with `template: qwen`.
    """
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    output_dir = Path(output_dir)
    hf_tokenizer = build_tiny_tokenizer(output_dir, "qwen", vocab_size, extra_corpus, digits)

    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(hf_tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size or hidden_size * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=hf_tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=hf_tokenizer.convert_tokens_to_ids("<|endoftext|>"),
    )
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = config.eos_token_id
    model.generation_config.pad_token_id = config.pad_token_id
    model.save_pretrained(str(output_dir))
    with open(output_dir / "tiny_model.json", "w", encoding="utf-8") as f:
        json.dump({"built_by": "llamafactory_agentic.testing.build_tiny_model", "seed": seed}, f)

    return output_dir


REAL_SIZE_CONFIGS = {
    # public architecture hyper-parameters of the Qwen2.5 instruct models (weights are random here)
    "qwen2.5-0.5b": dict(
        hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2
    ),
    "qwen2.5-1.5b": dict(
        hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2
    ),
    "qwen2.5-3b": dict(
        hidden_size=2048, intermediate_size=11008, num_hidden_layers=36, num_attention_heads=16, num_key_value_heads=2
    ),
    "qwen2.5-7b": dict(
        hidden_size=3584,
        intermediate_size=18944,
        num_hidden_layers=28,
        num_attention_heads=28,
        num_key_value_heads=4,
        vocab_size=152064,
        tie_word_embeddings=False,
    ),
    "qwen2.5-14b": dict(
        hidden_size=5120,
        intermediate_size=13824,
        num_hidden_layers=48,
        num_attention_heads=40,
        num_key_value_heads=8,
        vocab_size=152064,
        tie_word_embeddings=False,
        rms_norm_eps=1e-5,
    ),
}
QWEN_VOCAB_SIZE = 151936


def real_size_config(name: str = "qwen2.5-0.5b", **overrides):
    r"""`Qwen2Config` of a real Qwen2.5 size; `overrides` win.

    Vocabulary 151936 and tied embeddings up to 3B, 152064 and untied from 7B on, RoPE base 1e6.

    Raises:
        KeyError: for a name not in `REAL_SIZE_CONFIGS`.
    """
    from transformers import Qwen2Config

    values = dict(
        vocab_size=QWEN_VOCAB_SIZE,
        max_position_embeddings=32768,
        rope_theta=1000000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
    )
    values.update(REAL_SIZE_CONFIGS[name])
    values.update(overrides)
    return Qwen2Config(**values)


def build_real_size_model(
    output_dir: str | os.PathLike,
    name: str = "qwen2.5-0.5b",
    dtype: str = "bfloat16",
    device: str = "cpu",
    **overrides: Any,
) -> Path:
    r"""Build a random-weight model with a real architecture (for GPU timing runs without the model hub).

    The locally trained tokenizer is padded with ordinary added tokens `[extra_i]` up to the model's vocabulary
    (151936 or 152064 for Qwen2.5) so that every id a random model samples decodes to text. Their text holds no `>`
    (the last character of every stop string), so the rollout's stop-string check stays a table lookup for them, as
    for most tokens of a real vocabulary.

    Args:
        output_dir: Directory to save the model and tokenizer into.
        name: One of `REAL_SIZE_CONFIGS`.
        dtype: Storage dtype of the weights.
        device: Where the random weights are drawn (`cuda` is much faster for 7B and 14B); saved the same way.
        **overrides: Config values that win over the named shape (e.g. fewer layers for a smoke run).

    Returns:
        The output directory.

    Raises:
        KeyError: for an unknown `name`.
    """
    import torch
    from transformers import AutoTokenizer, Qwen2ForCausalLM

    output_dir = Path(output_dir)
    build_tiny_model(output_dir)  # tokenizer (and a tiny model that is overwritten below)
    tokenizer = AutoTokenizer.from_pretrained(str(output_dir))
    config = real_size_config(name, **overrides)
    tokenizer.add_tokens([f"[extra_{i}]" for i in range(config.vocab_size - len(tokenizer))])
    tokenizer.save_pretrained(str(output_dir))
    config = real_size_config(
        name,
        **overrides,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        bos_token_id=None,
    )
    torch.manual_seed(0)
    with torch.device(device):  # weights drawn in the storage dtype (no float32 copy of a 14B model)
        model = Qwen2ForCausalLM._from_config(config, dtype=getattr(torch, dtype))
    model.generation_config.eos_token_id = config.eos_token_id
    model.generation_config.pad_token_id = config.pad_token_id
    model.save_pretrained(str(output_dir))
    return output_dir


if __name__ == "__main__":
    import sys

    if len(sys.argv) > 2:
        print(build_real_size_model(sys.argv[1], sys.argv[2]))
    else:
        print(build_tiny_model(sys.argv[1] if len(sys.argv) > 1 else "saves/tiny-qwen2"))


class LoopbackServer:
    r"""A stdlib `ThreadingHTTPServer` on 127.0.0.1 serving `handler` from a daemon thread: the base of the test servers.

    Subclasses build their `BaseHTTPRequestHandler` and call `super().__init__(handler, port)`; `root` is
    `http://127.0.0.1:<port>` (port 0: a free one). Use as a context manager (serves once entered; `__exit__` stops
    serving and closes the socket), or call `httpd.serve_forever()` from a script.
    """

    def __init__(self, handler: Any, port: int = 0) -> None:
        r"""Bind the server (it serves once entered)."""
        import threading
        from http.server import ThreadingHTTPServer

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self.httpd.daemon_threads = True
        self.root = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> Any:
        r"""Start serving in a daemon thread."""
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        r"""Stop serving and close the socket."""
        self.httpd.shutdown()
        self.httpd.server_close()


def send_json(handler: Any, status: int, payload: Any) -> None:
    r"""Answer a `BaseHTTPRequestHandler` request with `payload` (JSON-encoded unless already bytes) and its length."""
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


class FakeJudgeServer(LoopbackServer):
    r"""A local OpenAI-compatible chat endpoint (`POST /v1/chat/completions`) standing in for an LLM judge.

    A hosted judge model cannot run here (no model hub, no web API), so tests of the `judge` reward start this stdlib
    `ThreadingHTTPServer` on 127.0.0.1 (real HTTP, one thread per request). It answers every chat request with
    `verdict(prompt)` (the last message's text; a str reply, or an `(http_status, body)` tuple), after `delay_s`
    seconds, and records the prompts and the most requests it served at the same time.

    Use as a context manager; `url` is the base URL (`http://127.0.0.1:<port>/v1`).
    """

    def __init__(self, verdict: Any = None, delay_s: float = 0.0, port: int = 0) -> None:
        r"""Bind the server (it serves once entered)."""
        import threading
        import time
        from http.server import BaseHTTPRequestHandler

        self.verdict = verdict or (lambda prompt: "Correct")
        self.delay_s = delay_s
        self.prompts: list[str] = []
        self.max_concurrent = 0
        self._active = 0
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server._lock:
                    server._active += 1
                    server.max_concurrent = max(server.max_concurrent, server._active)
                try:
                    if server.delay_s:
                        time.sleep(server.delay_s)
                    prompt = body["messages"][-1]["content"]
                    with server._lock:
                        server.prompts.append(prompt)
                    reply = server.verdict(prompt)
                finally:
                    with server._lock:
                        server._active -= 1
                if isinstance(reply, tuple):
                    status, payload = reply
                else:
                    message = {"role": "assistant", "content": reply}
                    status, payload = 200, {"object": "chat.completion", "choices": [{"index": 0, "message": message}]}
                send_json(self, status, payload)

        super().__init__(Handler, port)
        self.url = self.root + "/v1"
