# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""A tiny chat policy for LLaMA-Board's Chat with tools: it answers by calling python, and was never shown the result.

The random tiny model never writes a tool call by itself. `fit_chat_policy` fits it for a few seconds to answer
QUESTION, rendered exactly as LLaMA-Board's Chat renders it (LLaMA-Factory's `qwen` template, default system), with
CALL, then, after an observation, with ANSWER. The observation seen while fitting is `PLACEHOLDER_RESULT` and is
context only (not a label): the checkpoint has never seen "107", so a 107 in the page can only come from the python
tool that ran the call.
"""

from pathlib import Path


QUESTION = "What is 43+64?"
CALL = "<python>print(43+64)</python>"
PLACEHOLDER_RESULT = " <result>\n0\n</result>"  # the agent loop's observation form, with a number that is not 107
ANSWER = " <answer> The tool computed it. </answer>"


def fit_chat_policy(model_dir: Path, output_dir: Path, steps: int = 80, seed: int = 0) -> Path:
    r"""Fit the tiny model to answer QUESTION with CALL, PLACEHOLDER_RESULT (context), ANSWER, EOS; save it."""
    import torch
    from llamafactory.data import get_template_and_fix_tokenizer
    from llamafactory.hparams import DataArguments
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(seed)
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir))
    template = get_template_and_fix_tokenizer(tok, DataArguments(template="qwen"))
    messages = [{"role": "user", "content": QUESTION}, {"role": "assistant", "content": ""}]
    prompt, _ = template.encode_oneturn(tok, messages, None, None)
    ids, labels = list(prompt), [-100] * len(prompt)
    for text, trained in ((CALL, True), (PLACEHOLDER_RESULT, False), (ANSWER, True)):
        piece = tok.encode(text, add_special_tokens=False)
        ids += piece
        labels += piece if trained else [-100] * len(piece)
    ids.append(tok.eos_token_id)
    labels.append(tok.eos_token_id)
    ids_t, labels_t = torch.tensor([ids]), torch.tensor([labels])
    optim = torch.optim.AdamW(model.parameters(), lr=5e-3)
    model.train()
    for _ in range(steps):
        loss = model(input_ids=ids_t, labels=labels_t).loss
        loss.backward()
        optim.step()
        optim.zero_grad()
    model.save_pretrained(str(output_dir))
    tok.save_pretrained(str(output_dir))
    return Path(output_dir)
