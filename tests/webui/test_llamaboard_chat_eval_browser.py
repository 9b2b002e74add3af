# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""LLaMA-Board's Chat and Evaluate & Predict tabs in a real browser (`llamafactory-cli webui` + Playwright/Chromium).

Evaluate & Predict: the plugin's RL datasets are marked in the dataset list, LLaMA-Factory's own Start names the
missing predict packages with their install command, and the Agentic evaluation panel runs the real
`llamafactory-agentic eval` on the same checkpoint (2 questions, 1 run) and shows its summary and report.

Chat with tools: a tiny checkpoint fitted by `webui._helpers.fit_chat_policy` answers "What is 43+64?" with
`<python>print(43+64)</python>` (what is scripted: the checkpoint was fitted to write that call; it never saw 107, its
fitting observation was 0). LLaMA-Board's own chat shows the call with no result (issue 28: "it writes a `<python>`
call and invents the result"); with *Run tools* on, the agent loop of training stops at `</python>`, the python tool
runs the code in the training sandbox and its observation `107` appears in the page.
"""

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from webui._helpers import QUESTION, SEARCH_QUESTION, fit_chat_policy, fit_search_policy
from webui.test_llamaboard_browser import Board, board, page  # noqa: F401  (the server and browser fixtures)


pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def board_env(tmp_path_factory, tiny_model_dir):
    root = tmp_path_factory.mktemp("llamaboard_chat")
    policy = fit_chat_policy(tiny_model_dir, root / "chat_policy")
    workdir = root / "board"
    workdir.mkdir()
    (workdir / "env.yaml").write_text("DB_PASSWORD: hunter2\nAPI_TOKEN: ghp_abcdef\n")  # YAML with secrets, allowed
    return {"root": root, "policy": policy, "cwd": workdir}


def _last_answer(ui: Board) -> str:
    bubbles = ui.page.locator("#agentic_chatbot .message-row")
    return bubbles.nth(bubbles.count() - 1).inner_text()


def _ask(ui: Board, question: str, done: str, timeout: float = 120) -> str:
    rows = ui.page.locator("#agentic_chatbot .message-row")
    before = rows.count()
    query = ui.page.get_by_placeholder("Input...").filter(visible=True).first
    query.fill(question)
    ui.page.locator("#agentic_chat_submit").click()
    for _ in range(int(timeout * 4)):
        if rows.count() >= before + 2 and re.search(done, _last_answer(ui)):
            return _last_answer(ui)
        ui.page.wait_for_timeout(250)
    raise AssertionError(f"no answer matching {done!r}; last rows: {rows.all_inner_texts()[-3:]}")


def _record_training(folder: Path, **keys) -> str:
    r"""Write the `agentic_config.json` an ARPO run leaves in `folder` (with `keys`); return its system prompt."""
    from llamafactory.data.template import TEMPLATES

    from llamafactory_agentic.train.presets import record_system_prompt, save_agentic_config

    result = {"stage": "arpo", "preset": "arpo", "values": {}, "explicit": [], "from_preset": [], "derived": []}
    save_agentic_config(result, str(folder), SimpleNamespace(**keys))
    system = TEMPLATES["qwen"].default_system  # what training rendered the rows without a system prompt with
    record_system_prompt(str(folder), system)
    return system


def _trained_copy(board_env) -> tuple[Path, str]:
    r"""The chat policy as an RL run leaves it: its files and the `agentic_config.json` training writes beside them."""
    folder = board_env["root"] / "arpo_run"
    folder.mkdir(exist_ok=True)
    for item in board_env["policy"].iterdir():
        if not (folder / item.name).exists():
            (folder / item.name).symlink_to(item)
    system = _record_training(folder, agentic_search_topk=1, agentic_search_backend="replay", agentic_max_tool_calls=3,
                              agentic_python_timeout=20.0)  # fmt: skip
    return folder, system


def test_chat_runs_tools(page, board_env):  # noqa: F811
    ui = Board(page)
    trained, system = _trained_copy(board_env)
    ui.choose("Model name", "Custom")
    ui.fill("Model path", trained)
    ui.choose("Finetuning method", "full")
    ui.choose("Chat template", "qwen")
    page.get_by_role("tab", name="Chat").click()
    ui.click("Load model")
    page.locator("#agentic_chat_submit").wait_for(state="visible", timeout=120_000)

    # issue 35: the Tools fields and the system prompt are the checkpoint's (search top-k 1 as trained, not 10)
    ui.wait_text(page.locator("#agentic_chat_source"), r"as the checkpoint was trained", timeout=30)
    topk = page.locator("#agentic_chat_search_topk input").first  # the Chat's own default is 10
    assert topk.input_value() == "1", topk.input_value()
    assert page.locator("#agentic_chat_search_backend input").first.input_value() == "replay"
    assert page.locator("#agentic_chat_python_timeout input").first.input_value() == "20"
    assert page.get_by_placeholder("System prompt (optional)").filter(visible=True).first.input_value() == system
    assert not page.get_by_role("button", name="Submit", exact=True).nth(1).is_visible()  # LLaMA-Board's is hidden

    # LLaMA-Board's chat (Run tools off): the call is written, nothing runs it (the old behaviour)
    plain = _ask(ui, QUESTION, r"print\(43\+64\)")
    assert "107" not in plain, plain
    assert page.locator("#agentic_chat_trace").inner_text().strip() == ""

    # Run tools: the training agent loop and executor; the observation comes from the python sandbox
    ui.click("Clear history")  # the same one-turn prompt as above (the checkpoint was fitted on that one only)
    # wait for the cleared chat: _ask counts the rows before it asks, and a count taken before the clear lands waits
    # for two rows more than the new answer ever makes (CI saw exactly that)
    page.wait_for_function("document.querySelectorAll('#agentic_chatbot .message-row').length === 0", timeout=30_000)
    page.locator("#agentic_chat_run_tools input[type=checkbox]").set_checked(True)
    answer = _ask(ui, QUESTION, r"107")
    assert "print(43+64)" in answer and "<result>" in answer, answer
    trace = page.locator("#agentic_chat_trace")
    ui.wait_text(trace, r"call 1: python · ok", timeout=30)
    assert "107" in trace.locator(".ag-result").first.inner_text()
    assert "1 call" in trace.inner_text() and "finish eos" in trace.inner_text()
    ui.shot("chat_with_tools", at=page.locator("#agentic_chatbot"))

    # a tool config that does not exist: the message names it, nothing is generated
    config = page.locator("#agentic_chat_tool_config input").first
    config.fill(str(board_env["root"] / "no_tools.yaml"))
    config.press("Enter")
    failed = _ask(ui, QUESTION, r"could not start")
    assert "no_tools.yaml" in failed, failed

    # issue 34 high 4: a typed path outside recipes/ and the working directory is refused before it is read (it
    # showed /etc/shadow line by line), and a YAML file that is allowed never comes back in the message
    for typed in ("/etc/shadow", "/etc/passwd", str(board_env["cwd"] / "env.yaml")):
        config.fill(typed)
        config.press("Enter")
        failed = _ask(ui, QUESTION, r"could not start")
        assert typed in failed, failed
        if typed.startswith("/etc"):
            assert "reads only tool configs" in failed and "nothing was read" in failed, failed
        else:
            assert "2 unknown top-level keys (not named" in failed, failed
    body = page.locator("body").inner_text()
    assert "hunter2" not in body and "DB_PASSWORD" not in body and "root:" not in body
    ui.shot("chat_refuses_paths", at=page.locator("#agentic_chatbot"))


def test_evaluate_tab(page, board_env):  # noqa: F811
    from llamafactory_agentic.webui.evaluate import missing_predict_packages

    ui = Board(page)
    ui.choose("Model name", "Custom")
    ui.fill("Model path", board_env["policy"])
    ui.choose("Finetuning method", "full")
    ui.choose("Chat template", "qwen")
    page.get_by_role("tab", name="Evaluate & Predict").click()

    # the plugin's RL datasets are marked in Evaluate's dataset list
    ui.fill("Data dir", REPO / "data")
    dataset_box = page.get_by_label("Dataset", exact=True).filter(visible=True).first
    dataset_box.click()
    options = page.get_by_role("option").filter(visible=True)
    options.first.wait_for()
    labels = options.all_inner_texts()
    assert "arpo_rl_reasoning_10k_local (arpo_rl: RL prompts, use Agentic evaluation)" in labels, labels
    page.get_by_role("option", name="arpo_sft_demo", exact=True).click()
    page.keyboard.press("Escape")

    # LLaMA-Factory's Evaluate & Predict: refused with the install command while jieba, nltk or rouge-chinese is missing
    missing = missing_predict_packages()
    if missing:
        ui.click("Start")
        ui.wait_text(page.locator("body"), "pip install " + " ".join(missing), timeout=30)

    # the agentic evaluation panel: llamafactory-agentic eval with a preset; its summary and report
    rows = [json.loads(line) for line in (REPO / "evaluation" / "samples" / "capitals.jsonl").read_text().splitlines()]
    bench = board_env["root"] / "capitals2.jsonl"
    bench.write_text("".join(json.dumps(row) + "\n" for row in rows[:2]))
    config = board_env["cwd"] / "eval.yaml"  # the working directory's (a path elsewhere is refused)
    config.write_text(
        "template: qwen\ninfer_backend: huggingface\nagentic_search_backend: replay\n"
        f"agentic_cache_path: {board_env['root'] / 'tool_cache.sqlite'}\nagentic_python_timeout: 10\n"
        f"eval_benchmarks:\n  - {{name: capitals, path: {bench}, task: qa, metric: f1}}\n"
        "eval_runs: 1\neval_max_new_tokens: 16\neval_max_response_length: 48\neval_batch_size: 2\n"
    )
    status = page.locator("#agentic_eval_status")
    box = page.locator("#agentic_eval_config input").first
    # the config picker offers "(no config)" first (issue 34 medium 6) and refuses a file outside its folders
    assert box.input_value().startswith("(no config"), box.input_value()
    box.fill("/etc/shadow")
    box.press("Enter")
    page.locator("#agentic_eval_btn").click()
    ui.wait_text(status, r"reads only evaluation configs", timeout=30)
    box.fill(str(config))
    box.press("Enter")
    # issue 34 medium 13: the first click with Runs and Tokens per call left empty ("Empty: the config's") failed
    # with the toast "Value 0 is less than minimum value 1" and both fields red; now they stay empty and run
    for name in ("runs", "max_new"):
        assert page.locator(f"#agentic_eval_{name} textarea, #agentic_eval_{name} input").first.input_value() == ""
    page.locator("#agentic_eval_btn").click()
    ui.wait_text(status, "llamafactory-agentic eval", timeout=60)
    assert "less than minimum" not in page.locator("body").inner_text()
    text = ui.wait_text(status, r"Evaluation finished|ended with exit code", timeout=400)
    assert "Evaluation finished" in text, text
    assert "eval_preset=paper" in text and "eval_runs=" not in text and "eval_max_new_tokens=" not in text
    summary = ui.wait_text(page.locator("#agentic_eval_summary"), r"capitals", timeout=30)
    assert "Protocol paper" in summary and "pass@1" in summary, summary  # (Markdown rendered: no backticks)
    report = re.search(r"Report: (\S+report\.html)", text)
    assert report and Path(report.group(1)).is_file(), text
    assert "report.html" in page.locator("#agentic_eval_report").inner_text()
    ui.shot("agentic_eval", page.locator("#agentic_eval_panel"))


def test_load_recipe(page, board_env):  # noqa: F811
    # issue 35: the panel started from defaults (M 16, 128 prompts, 4096 tokens) with no way to load a shipped recipe
    ui = Board(page)
    page.get_by_role("tab", name="Train").click()
    ui.choose("Stage", "ARPO (agentic RL)")
    page.locator("#agentic_recipe").wait_for(state="visible")
    assert ui.agentic_value("arpo_rollout_n") == "16"  # AgenticArguments' default
    picker = page.locator("#agentic_recipe input").first
    picker.click()
    page.get_by_role("option", name="recipes: tiny/arpo_cpu.yaml", exact=True).click()
    page.locator("#agentic_recipe_btn").click()
    ui.wait_text(page.locator("#agentic_checks"), r"Recipe \S*arpo_cpu\.yaml loaded", timeout=30)
    for _ in range(60):  # the fields update with the message; give the page a moment to draw them
        if ui.agentic_value("arpo_rollout_n") == "4":
            break
        page.wait_for_timeout(250)
    assert ui.agentic_value("arpo_rollout_n") == "4" and ui.agentic_value("arpo_max_response_length") == "96"
    assert ui.agentic_value("agentic_search_index") == "saves/search_index"
    assert ui.field("Model path").input_value() == "saves/tiny-qwen2/agentic_sft"
    assert ui.field("Learning rate").input_value() == "0.0001"
    assert page.get_by_text("arpo_rl_reasoning_10k_local", exact=True).filter(visible=True).count() == 1  # its chip
    extra = json.loads(page.get_by_label("Extra arguments").first.input_value())  # in the closed Extra accordion
    assert extra["max_steps"] == 2 and extra["save_steps"] == 2, extra  # save_steps 2: under the slider's minimum
    assert page.get_by_label("Stage", exact=True).filter(visible=True).first.input_value() == "ARPO (agentic RL)"
    ui.shot("load_recipe", at=page.locator("#agentic_panel"))

    # issue 35: in Chinese the labels were translated, but help texts and check messages stayed English
    ui.choose("Language", "zh")
    try:
        label = page.locator("#ag-arpo_rollout_n")
        ui.wait_text(label, r"组大小 M \(arpo_rollout_n\)", timeout=20)
        assert "组大小 M：每个提示的轨迹数" in label.inner_text(), label.inner_text()  # its help text
        page.locator("#agentic_check_btn").click()
        checks = ui.wait_text(page.locator("#agentic_checks"), r"启动前检查 · \d", timeout=60)
        assert re.search(r"每次展开产生 \d+ × \d+ 条轨迹，供 \d+ 次优化器更新使用", checks), checks
        assert "each rollout gives" not in checks and "the recipes use" not in checks, checks
        ui.shot("load_recipe_zh", at=page.locator("#agentic_panel"))
    finally:
        ui.choose("语言", "en")  # the language drop-down's own label is translated too


def _answered_room(text: str) -> str:
    found = re.findall(r"<answer> room (\d+) </answer>", text)
    assert found, text
    return found[-1]


def test_chat_search_topk_from_checkpoint(page, board_env, tiny_model_dir):  # noqa: F811
    # issue 35: the Chat's search returned 10 snippets where training used 1, so the demo's ARPO model answered a
    # look-up wrongly. The demo model takes minutes to train (docs/llamaboard.md has that run, made by hand); here a
    # tiny checkpoint "trained with top-k 1" answers from Ada's snippet when it sees one snippet and misreads ten
    # (webui/_helpers.py says what is scripted). The real local BM25 search runs in both answers.
    fitted = fit_search_policy(tiny_model_dir, board_env["root"] / "search_policy", board_env["root"] / "index")
    index = board_env["root"] / "index"
    _record_training(fitted["path"], agentic_search_topk=1, agentic_search_backend="local",
                     agentic_search_index=str(index), agentic_max_tool_calls=1)  # fmt: skip
    ui = Board(page)
    page.get_by_role("tab", name="Chat").click()
    if page.locator("#agentic_chat_submit").is_visible():  # a model of an earlier test is loaded
        ui.click("Unload model")
        page.locator("#agentic_chat_submit").wait_for(state="hidden", timeout=60_000)
    ui.choose("Model name", "Custom")
    ui.fill("Model path", fitted["path"])
    ui.choose("Finetuning method", "full")
    ui.choose("Chat template", "qwen")
    ui.click("Load model")
    page.locator("#agentic_chat_submit").wait_for(state="visible", timeout=120_000)
    ui.wait_text(page.locator("#agentic_chat_source"), r"as the checkpoint was trained", timeout=30)
    topk = page.locator("#agentic_chat_search_topk input").first
    assert topk.input_value() == "1", topk.input_value()  # the Chat's own default is 10
    assert page.locator(
        "#agentic_chat_search_index input, #agentic_chat_search_index textarea"
    ).first.input_value() == str(index)
    page.locator("#agentic_chat_run_tools input[type=checkbox]").set_checked(True)

    def ask() -> str:
        ui.click("Clear history")
        page.wait_for_function("document.querySelectorAll('#agentic_chatbot .message-row').length === 0")
        return _ask(ui, SEARCH_QUESTION, r"</answer>")

    answer = ask()  # top-k 1 from the checkpoint: one snippet, Ada's
    assert "call 1: search · ok" in page.locator("#agentic_chat_trace").inner_text()
    assert "Page 2:" not in answer and _answered_room(answer) == fitted["right"], answer
    ui.shot("chat_topk_from_checkpoint", at=page.locator("#agentic_chatbot"))

    topk.fill("10")  # the Chat's former default: ten snippets, and the look-up goes wrong
    topk.blur()
    answer = ask()
    assert "Page 10:" in answer and _answered_room(answer) == fitted["wrong"] != fitted["right"], answer
