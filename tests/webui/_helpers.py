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


# ---------------------------------------------------------------------------------------------- search top-k
SEARCH_QUESTION = "Which room is Ada Lovelace in?"
SEARCH_CALL = "<search>Ada Lovelace room</search>"
RIGHT_ROOM = "7"
SEARCH_CORPUS = [f"Ada Lovelace works in room {RIGHT_ROOM}."] + [
    f"{name} works in room {room}."
    for name, room in (
        ("Grace Hopper", 3), ("Alan Turing", 12), ("Edsger Dijkstra", 5), ("Barbara Liskov", 9),
        ("Donald Knuth", 14), ("Frances Allen", 2), ("John Backus", 11), ("Margaret Hamilton", 8),
        ("Niklaus Wirth", 4), ("Leslie Lamport", 6),
    )
]  # fmt: skip


def _answer(room: str) -> str:
    return f" <answer> room {room} </answer>"


def _search_turn(model, tok, prompt, index_dir: Path, topk: int, budget: int = 512):
    from llamafactory_agentic.webui.chat import ChatTools, build_chat_executor, run_turn

    settings = ChatTools(search_index=str(index_dir), search_topk=topk, search_backend="local", max_tool_calls=1)
    executor = build_chat_executor(settings)
    try:
        return run_turn(model, tok, prompt, executor, settings, budget, 0.0, 1.0)  # greedy
    finally:
        executor.close()


def fit_search_policy(model_dir: Path, output_dir: Path, index_dir: Path, steps: int = 60, seed: int = 0) -> dict:
    r"""A tiny policy that was trained with one snippet per search and misreads ten (the demo ARPO model's look-up).

    What is scripted: the tiny model is fitted to answer SEARCH_QUESTION with SEARCH_CALL and then, after the
    observation the real local search backend (BM25 over SEARCH_CORPUS in `index_dir`) returns through the real agent
    loop, with the room of Ada's snippet when the observation holds one snippet (top-k 1, as "trained") and with the
    room of the last snippet when it holds ten (top-k 10, the Chat's default): the answer depends only on the
    observation it sees. What is not scripted: which top-k the Chat passes to the search backend, and so which
    observation the checkpoint gets, in LLaMA-Board.

    Returns:
        `{"path", "right", "wrong"}`: the saved checkpoint and the answers it gives with top-k 1 and with top-k 10.
    """
    import json
    import re

    import torch
    from llamafactory.data import get_template_and_fix_tokenizer
    from llamafactory.hparams import DataArguments
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from llamafactory_agentic.webui.chat import prompt_ids

    index_dir.mkdir(parents=True, exist_ok=True)
    (index_dir / "corpus.jsonl").write_text(
        "".join(json.dumps({"id": str(i), "text": text}) + "\n" for i, text in enumerate(SEARCH_CORPUS))
    )
    torch.manual_seed(seed)
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir))
    template = get_template_and_fix_tokenizer(tok, DataArguments(template="qwen"))
    prompt = prompt_ids(template, tok, [{"role": "user", "content": SEARCH_QUESTION}], None)
    optim = torch.optim.AdamW(model.parameters(), lr=5e-3)

    def fit(sequences: list[tuple[list[int], list[int]]], rounds: int) -> None:
        model.train()
        for _ in range(rounds):
            for ids, labels in sequences:
                loss = model(input_ids=torch.tensor([ids]), labels=torch.tensor([labels])).loss
                loss.backward()
                optim.step()
                optim.zero_grad()
        model.eval()

    # first the call (and an end after any observation), so that the agent loop runs the search and stops soon after
    call = tok.encode(SEARCH_CALL, add_special_tokens=False)
    context = tok.encode(" <result>\nPage 1: -\n</result>", add_special_tokens=False)
    first = prompt + call + context + [tok.eos_token_id]
    fit([(first, [-100] * len(prompt) + call + [-100] * len(context) + [tok.eos_token_id])], 30)
    sequences, answers = [], {}
    for topk in (1, 10):
        traj = _search_turn(model, tok, prompt, index_dir, topk, budget=320)  # ten snippets: about 280 tokens
        if traj.num_tool_calls != 1 or SEARCH_CALL not in tok.decode(traj.response_ids):
            raise AssertionError(f"the fitted call did not run: {tok.decode(traj.response_ids)!r}")
        end = max(i for i, mask in enumerate(traj.loss_mask) if mask == 0) + 1  # the observation's last token
        response, mask = list(traj.response_ids[:end]), list(traj.loss_mask[:end])
        observation = tok.decode([t for t, m in zip(response, mask) if m == 0])
        rooms = re.findall(r"room (\d+)", observation)
        if len(rooms) != topk:
            raise AssertionError(f"top-k {topk}: {len(rooms)} snippets in the observation {observation!r}")
        answers[topk] = rooms[-1]
        answer = tok.encode(_answer(rooms[-1]), add_special_tokens=False) + [tok.eos_token_id]
        labels = [-100] * len(prompt) + [t if m else -100 for t, m in zip(response, mask)] + answer
        sequences.append((prompt + response + answer, labels))
    if answers[1] != RIGHT_ROOM or answers[10] == RIGHT_ROOM:
        raise AssertionError(f"BM25 ranked the corpus unexpectedly: {answers}")
    fit(sequences, steps)
    for topk in (1, 10):  # the fitted policy, greedy, through the real agent loop and search backend
        text = tok.decode(_search_turn(model, tok, prompt, index_dir, topk).response_ids, skip_special_tokens=True)
        if f"room {answers[topk]} </answer>" not in text:
            raise AssertionError(f"top-k {topk}: the fitted policy answered {text!r}")
    model.save_pretrained(str(output_dir))
    tok.save_pretrained(str(output_dir))
    return {"path": Path(output_dir), "right": answers[1], "wrong": answers[10]}
