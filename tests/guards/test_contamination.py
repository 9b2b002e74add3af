# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""Search contamination guard: blocklist in the web backend (fake search API on 127.0.0.1: the real APIs cannot be
reached from the test machines), the answer-leak check and `tools/answer_leak_rate` in the trainer's rollouts."""

import pytest

from llamafactory_agentic.guards.contamination import (
    DEFAULT_BLOCKLIST,
    Blocklist,
    answer_leak_rate,
    answer_leaks,
    guard_observation,
    observation_texts,
)


@pytest.mark.parametrize(
    "url, blocked",
    [
        ("https://huggingface.co/datasets/gaia-benchmark/GAIA/blob/main/2023/validation/metadata.jsonl", True),
        ("huggingface.co/datasets/cais/hle/viewer", True),
        ("https://HuggingFace.co/datasets/basicv8vc/SimpleQA", True),
        ("https://huggingface.co/datasets/someone/simpleqa-verified", True),
        ("https://www.xbench.org/leaderboard", True),
        ("https://github.com/Alibaba-NLP/WebWalker/tree/main/data", True),
        ("https://en.wikipedia.org/wiki/GAIA", False),
        ("https://huggingface.co/datasets/openai/gsm8k", False),
        ("https://huggingface.co/gaia-benchmark", False),  # an org page, not the dataset
        ("", False),
        (None, False),
    ],
)
def test_default_blocklist(url, blocked):
    assert Blocklist().blocks(url) is blocked


def test_blocklist_options():
    assert Blocklist("none").patterns == () and not Blocklist([]).blocks("https://huggingface.co/datasets/cais/hle")
    custom = Blocklist(["example.com/answers", "default"])
    assert custom.blocks("https://sub.example.com/answers/q1") and not custom.blocks("https://example.com/other")
    assert (
        custom.blocks("https://huggingface.co/datasets/cais/hle")
        and len(custom.patterns) == len(DEFAULT_BLOCKLIST) + 1
    )
    with pytest.raises(ValueError, match="host"):
        Blocklist(["", "x.org"])


def test_answer_leak_normalised_as_the_reward():
    assert answer_leaks("Page 1: The capital is PARIS, France.", "paris")
    assert answer_leaks("costs $10.50 in total", "10.5")  # the reward's number normalisation
    assert answer_leaks("it is 1,000 m high", '["1000", "one thousand"]')  # a list of references
    assert not answer_leaks("Parisian cafés", "Paris")  # whole words only
    assert not answer_leaks("anything", None) and not answer_leaks("", "x")


def test_mask_and_drop_modes():
    text = "Page 1: Paris is the capital. Page 2: paris, France."
    assert guard_observation(text, "Paris", "log") == (text, True)
    masked, leaked = guard_observation(text, "Paris", "mask")
    assert leaked and "paris" not in masked.lower() and masked.count("[masked]") == 2
    dropped, _ = guard_observation(text, "Paris", "drop")
    assert "Paris" not in dropped and "withheld" in dropped
    assert guard_observation("no answer here", "Paris", "drop") == ("no answer here", False)
    with pytest.raises(ValueError, match="mask"):
        guard_observation(text, "Paris", "hide")


def test_web_backend_drops_blocked_results(fake_server):
    """A fake Serper API answers with a GAIA dataset page that holds the answer, a Wikipedia page and a link-less
    result: the default blocklist drops the GAIA one before the model sees it; `blocklist: none` keeps it."""
    from llamafactory_agentic.tools.search import SearchTool

    results = [
        {
            "title": "GAIA",
            "link": "https://huggingface.co/datasets/gaia-benchmark/GAIA",
            "snippet": "Final answer: 1927",
        },
        {"title": "Wiki", "link": "https://en.wikipedia.org/wiki/X", "snippet": "X was founded in 1899"},
        {"title": "no link", "snippet": "an unlinked snippet"},
    ]
    server = fake_server(lambda method, path, headers, body: (200, {"organic": results}))
    guarded = SearchTool(backend="web", provider="serper", api_key="k", endpoint=server.url, topk=5)
    text = guarded.execute("when was X founded").text
    assert "1927" not in text and "1899" in text and "unlinked" in text
    assert guarded.backend.blocked_results == 1
    assert answer_leak_rate([[text]], ["1927"]) == 0.0
    open_tool = SearchTool(
        backend="web", provider="serper", api_key="k", endpoint=server.url, topk=5, blocklist="none"
    )
    leaked = open_tool.execute("when was X founded").text
    assert "1927" in leaked and answer_leak_rate([[leaked]], ["1927"]) == 1.0


def test_leak_rate_over_replayed_trajectories(tiny_tokenizer):
    """Observations cut out of token sequences by the loss mask, as the trainer does; planted answers in 2 of 4."""
    tok = tiny_tokenizer

    def trajectory(obs_text):
        ids, mask = [], []
        for text, m in (
            ("<search> q </search>", 1),
            (f"<result> {obs_text} </result>", 0),
            ("<answer> a </answer>", 1),
        ):
            piece = tok(text, add_special_tokens=False)["input_ids"]
            ids += piece
            mask += [m] * len(piece)
        return observation_texts(tok, ids, mask)

    obs = [trajectory("the tower is 330 m tall"), trajectory("no numbers"), trajectory("born in Ulm"), trajectory("x")]
    assert len(obs[0]) == 1 and "330 m tall" in obs[0][0] and "answer" not in obs[0][0]
    assert answer_leak_rate(obs, ["330", "330", "Ulm", "Berlin"]) == 0.5


def test_trainer_logs_answer_leak_rate(tmp_path, tiny_model_dir, tiny_tokenizer):
    """The real trainer and agent loop (scripted engine, every trajectory searches; the executor answers "42"): a
    group whose ground truth is 42 leaks, the other does not -> tools/answer_leak_rate 0.5 in the rollout metrics."""
    from train._helpers import make_rows
    from train.test_arpo_observability import build

    trainer, _ = build(tmp_path, tiny_model_dir, tiny_tokenizer, batch=2, accum=2, max_steps=1)
    rows = make_rows(tiny_tokenizer, 2)
    rows[0]["_ground_truth"], rows[1]["_ground_truth"] = "42", "3"
    metrics = trainer.step.roll_out_and_score(rows, training=True).metrics
    assert metrics["tools/answer_leak_rate"] == pytest.approx(0.5)
