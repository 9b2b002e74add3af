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

r"""The model view of a response: model-written text only, observations reduced to `<result></result>`.

Documented in docs/algorithms.md §6.5 (**Decision**) and §12 (the reference
scores decoded text that includes tool output).
"""

from collections.abc import Sequence
from itertools import groupby
from typing import Any


RESULT_PLACEHOLDER = "<result></result>"


def build_model_view(
    tokenizer: Any,
    response_ids: Sequence[int],
    loss_mask: Sequence[int],
    eos_token_id: int | Sequence[int] | None,
) -> str:
    r"""Decode a response for reward computation, keeping only what the model wrote.

    The response is cut at its first model-written EOS token, i.e. the first EOS id whose loss mask is 1 (the EOS itself
    and everything after it are dropped). An EOS id inside an observation (loss mask 0, e.g. a tool output holding the
    literal text `<|im_end|>`, which the tokenizer maps to the special id) does not cut: the model wrote nothing there
    (docs/algorithms.md §6.5), and neither does a model-written EOS that an observation follows (the end of a native
    tool-call turn, `agentic_tool_protocol: template`, docs/algorithms.md §2.7). Every observation
    span, i.e. every maximal run of loss-mask-0 tokens (the inserted ` <result>\n...\n</result>` string), becomes the
    literal `<result></result>`; every run of loss-mask-1 tokens is decoded on its own with special tokens skipped.
    Tag-order checks thus still see the result tags, while answer extraction, the tool bonus and every tag count see
    model text only: a `\boxed{}` or `<answer>` that appears only in a tool output earns nothing.

    Runs are decoded separately; this is exact for byte-level BPE tokenizers (Qwen, Llama 3), whose observation ids
    are encoded on their own (docs/algorithms.md §2.3). SentencePiece may drop a leading space of a run after an
    observation, which no reward rule depends on.

    Args:
        tokenizer: A Hugging Face tokenizer (`decode` is used).
        response_ids: Response token ids (no prompt, no padding), `[response_len]`.
        loss_mask: 1 for sampled tokens, 0 for observation tokens, `[response_len]`.
        eos_token_id: EOS id or ids (e.g. `<|im_end|>`); None disables the cut. Only occurrences with loss mask 1
            cut.

    Returns:
        The model view string.

    Raises:
        ValueError: `response_ids` and `loss_mask` differ in length.
    """
    ids = [int(x) for x in response_ids]
    mask = [int(x) for x in loss_mask]
    if len(ids) != len(mask):
        raise ValueError(f"response_ids ({len(ids)}) and loss_mask ({len(mask)}) differ in length.")
    if eos_token_id is None:
        eos_ids: set[int] = set()
    elif isinstance(eos_token_id, int):
        eos_ids = {eos_token_id}
    else:
        eos_ids = {int(x) for x in eos_token_id}
    for position, (token, trained) in enumerate(zip(ids, mask)):
        if trained and token in eos_ids:
            if position + 1 < len(mask) and mask[position + 1] == 0:
                continue  # a native tool call's end of turn: the template's tool message follows (§2.7)
            ids, mask = ids[:position], mask[:position]
            break

    pieces = []
    index = 0
    for trained, run in groupby(mask, key=lambda value: value != 0):
        length = len(list(run))
        if trained:
            pieces.append(
                tokenizer.decode(
                    ids[index : index + length], skip_special_tokens=True, clean_up_tokenization_spaces=False
                )
            )
        else:
            pieces.append(RESULT_PLACEHOLDER)
        index += length
    return "".join(pieces)
