# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""Search contamination guard: blocklist in the web backend (fake search API on 127.0.0.1: the real APIs cannot be
reached from the test machines), the answer-leak check and `tools/answer_leak_rate` in the trainer's rollouts."""

import pytest

from llamafactory_agentic.rewards.contamination import (
    answer_leak_rate,
    answer_leaks,
    guard_observation,
    observation_texts,
)
from llamafactory_agentic.tools.blocklist import DEFAULT_BLOCKLIST, Blocklist


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


def _leaky_replay_cache(path):
    """A replay search cache with a planted leak: `query 0` returns a page holding the answer 3, `query 1` does not."""
    from llamafactory_agentic.tools import normalize_search_query, open_cache

    cache = open_cache(str(path))
    cache.put("search", normalize_search_query("query 0"), "Page 1: The sum of one and two is 3, as the key says.")
    cache.put("search", normalize_search_query("query 1"), "Page 1: Addition is a basic arithmetic operation.")
    cache.close()
    return str(path)


@pytest.mark.parametrize("mode", ["log", "mask", "drop"])
def test_two_step_arpo_run_with_planted_leaks(tmp_path, tiny_model_dir, tiny_tokenizer, mode):
    """A 2-step CPU ARPO run (real trainer, real tool executor, replay search over a SQLite cache with a planted
    answer; the policy's text is scripted: the tiny random model never writes a search call). `log` shows the leak in
    `tools/answer_leak_rate`; `mask` and `drop` (agentic_contamination_mode) keep the answer from the model, so
    the rate falls to 0 and `rollout/contamination_guarded` counts the guarded observations."""
    from train._helpers import agentic_args
    from train.test_arpo_observability import StatusReadingEngine
    from train.test_arpo_trainer import M, make_trainer

    from llamafactory_agentic.rollout import AgenticRollout
    from llamafactory_agentic.tools import ToolExecutor, open_cache
    from llamafactory_agentic.tools.search import SearchTool
    from llamafactory_agentic.train.arpo.config import default_rollout_config, rollout_config_from_args

    cache_path = _leaky_replay_cache(tmp_path / "replay.sqlite")
    eos = tiny_tokenizer.convert_tokens_to_ids("<|im_end|>")
    args = agentic_args("arpo", agentic_contamination_mode=mode)
    config = default_rollout_config(eos_token_id=eos, group_size=M, initial_rollouts=2, beam_size=2, branch_rule="deterministic",
                           branch_alpha=0.5, branch_tau=0.1, max_tool_calls=3, max_response_length=256,
                           contamination_mode=args.agentic_contamination_mode)  # fmt: skip
    cache = open_cache(cache_path, mode="read_only")
    executor = ToolExecutor([SearchTool(backend="replay", cache=cache)], cache=None)
    engine = StatusReadingEngine(tiny_tokenizer, str(tmp_path / "progress.json"))
    rollout = AgenticRollout(engine, executor, tiny_tokenizer, config)
    trainer = make_trainer(tmp_path, tiny_model_dir, tiny_tokenizer, args, rollout=rollout, batch=2, accum=2,
                           max_steps=2)  # fmt: skip
    trainer.train()
    executor.close()
    cache.close()
    logged = [r for r in trainer.state.log_history if "tools/answer_leak_rate" in r]
    assert logged, trainer.state.log_history
    leak_rate = logged[0]["tools/answer_leak_rate"]
    observations = [
        tiny_tokenizer.decode([t for t, m in zip(traj.response_ids, traj.loss_mask) if m == 0])
        for group in rollout.last_state.groups
        for traj in group
    ]
    assert any("Addition is a basic arithmetic operation." in o for o in observations)  # the clean page stays
    if mode == "log":
        assert leak_rate == pytest.approx(1.0) and all("is 3, as the key says" in o for o in observations)
    else:
        assert leak_rate == 0.0 and not any("is 3" in o for o in observations)
        assert logged[0]["rollout/contamination_guarded"] > 0
        marker = "[masked]" if mode == "mask" else "[result withheld"
        assert all(marker in o for o in observations)
    # the key reaches the trainer's own rollout config
    built = rollout_config_from_args(args, _sampling(), eos)
    assert built.contamination_mode == mode


def _sampling():
    from types import SimpleNamespace

    return SimpleNamespace(do_sample=True, temperature=1.0, top_p=1.0, top_k=0)


def test_unknown_contamination_mode_is_refused():
    from llamafactory_agentic.train.arpo.config import default_rollout_config

    with pytest.raises(ValueError, match="agentic_contamination_mode"):
        default_rollout_config(contamination_mode="hide")


@pytest.mark.parametrize("mode", ["log", "mask"])
def test_eval_run_shows_answer_leak_rate_and_masks(tmp_path, tiny_model_dir, tiny_tokenizer, mode):
    """`llamafactory-agentic eval` (in-process; the policy is the local fake OpenAI-compatible server of the
    evaluation tests, real HTTP) with replay search over a cache with a planted answer: one of two questions reads a
    page holding its answer. The leak rate is in metrics.json, summary.md, summary.csv and the HTML report; with
    `agentic_contamination_mode: mask` the model never sees the answer and the rate is 0."""
    import json

    from evaluation.fake_openai import FakeOpenAIServer
    from evaluation.helpers import scripted_policy, write_jsonl

    from llamafactory_agentic.evaluation import evaluate
    from llamafactory_agentic.evaluation.records import load_all_records

    scripts = {
        "What is one plus two?": ["<think> s </think> <search> query 0 </search>", "<answer> \\boxed{3} </answer>"],
        "What is two plus two?": ["<think> s </think> <search> query 1 </search>", "<answer> \\boxed{4} </answer>"],
    }
    data = write_jsonl(tmp_path / "qa.jsonl", [{"question": q, "answer": a} for q, a in
                                              zip(scripts, ["3", "4"])])  # fmt: skip
    with FakeOpenAIServer(tiny_tokenizer, scripted_policy(scripts)) as server:
        metrics = evaluate(
            {
                "model_name_or_path": str(tiny_model_dir),
                "template": "qwen",
                "agentic_search_backend": "replay",
                "agentic_cache_path": _leaky_replay_cache(tmp_path / "replay.sqlite"),
                "agentic_cache_mode": "read_only",
                "agentic_contamination_mode": mode,
                "eval_preset": "paper",
                "eval_benchmarks": [{"name": "sums", "path": str(data), "task": "qa", "metric": "em"}],
                "eval_runs": 1,
                "eval_progress": False,
                "eval_base_url": server.url,
                "eval_output_dir": str(tmp_path / "out"),
            }
        )
    out = tmp_path / "out"
    rate = 0.5 if mode == "log" else 0.0
    assert metrics["benchmarks"]["sums"]["answer_leak_rate"] == pytest.approx(rate)
    saved = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    assert saved["benchmarks"]["sums"]["answer_leak_rate"] == pytest.approx(rate)
    md = (out / "summary.md").read_text(encoding="utf-8")
    assert "answer leak" in md and f"| {100 * rate:.1f} |" in md.split("| sums |", 1)[1].split("\n", 1)[0] + "|"
    assert "answer_leak_rate" in (out / "summary.csv").read_text(encoding="utf-8").splitlines()[0]
    assert "answer_leak_rate" in (out / "report.html").read_text(encoding="utf-8")
    records = {r["question"]: r for r in load_all_records(out)}
    leaky = "".join(t for kind, t in records["What is one plus two?"]["segments"] if kind == "obs")
    assert records["What is one plus two?"]["answer_leak"] is (mode == "log")
    assert ("is 3, as the key says" in leaky) is (mode == "log") and ("[masked]" in leaky) is (mode == "mask")
    assert records["What is two plus two?"]["answer_leak"] is False
    if mode == "mask":
        assert saved["protocol"]["tools"]["contamination_mode"] == "mask"
