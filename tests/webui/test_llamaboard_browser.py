# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""LLaMA-Board in a real browser: `llamafactory-cli webui` in a subprocess, driven by Playwright with Debian's
headless Chromium (the system browser: Playwright never downloads one here).

One user session, step by step: choose `arpo`, see the agentic panel (RLHF hidden, presets shown, labels with their
keys, stage-specific output directory, fitting datasets first), run the checks (a mistyped key, a bad row, an SFT
file registered as `arpo_rl`, a missing search index, bf16 on a CPU-only machine, a batch geometry that does not
split), fix them in the panel, preview the command with the effective values, save and load the arguments, start a
2-step run of the tiny model on ARPO rows (the released files where present, else synthetic ones in their layout)
with the real tools, watch the RL plots fill (identical-reward groups
included) and the rollout progress line, see the finished-run warning, open the rollout viewer, switch stages (a new
output directory, the checks box cleared, AEPO naming the typed values it keeps), abort a run during its rollout, and
switch to Chinese. Screenshots of every step go to `saves/webui_screens/`.
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from llamafactory_agentic.webui.fields import field_by_name


pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SCREENS = Path(os.environ.get("AGENTIC_WEBUI_SCREENS", REPO / "saves" / "webui_screens"))
CHROMIUM = os.environ.get("AGENTIC_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",  # root in CI and here
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-quic",
]


@pytest.fixture(scope="module")
def board_env(tmp_path_factory, tiny_model_dir, arpo_data):
    import pyarrow.parquet as pq
    from train._helpers import fit_tool_policy

    from llamafactory_agentic.tools.index import build_corpus_from_cache_json

    root = tmp_path_factory.mktemp("llamaboard")
    datasets = root / "data"
    datasets.mkdir()
    info = json.loads((REPO / "data" / "dataset_info.json").read_text())
    info["sft_as_rl"] = {"file_name": "arpo_sft_demo.jsonl", "formatting": "arpo_rl"}  # a wrong registration
    (datasets / "dataset_info.json").write_text(json.dumps(info))
    shutil.copy(REPO / "data" / "arpo_sft_demo.jsonl", datasets / "arpo_sft_demo.jsonl")
    (datasets / "arpo").symlink_to(arpo_data / "arpo", target_is_directory=True)
    rows = pq.read_table(arpo_data / "arpo" / "rl" / "train_10k.parquet").slice(0, 16).to_pylist()
    policy = root / "policy"
    fit_tool_policy(tiny_model_dir, policy, rows, steps=120, context=48)
    build_corpus_from_cache_json(arpo_data / "arpo" / "search_cache.json", root / "search_index")
    workdir = root / "board"
    workdir.mkdir()
    return {
        "root": root,
        "datasets": datasets,
        "policy": policy,
        "search_index": root / "search_index",
        "cwd": workdir,
    }


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def board(board_env):
    """`llamafactory-cli webui` on a free port (its own process group, stopped at the end)."""
    port = _free_port()
    env = dict(
        os.environ,
        PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        GRADIO_SERVER_NAME="127.0.0.1",
        GRADIO_SERVER_PORT=str(port),
        GRADIO_ANALYTICS_ENABLED="False",
        BROWSER="true",  # LLaMA-Board opens a browser tab on launch: let it run `true` instead
        CUDA_VISIBLE_DEVICES="",
        HF_HUB_OFFLINE="1",
        WANDB_DISABLED="true",
        OMP_NUM_THREADS="1",
    )
    env.pop("LLAMAFACTORY_AGENTIC_DISABLE", None)
    log = open(board_env["root"] / "board.log", "w")
    proc = subprocess.Popen(
        [str(BIN / "llamafactory-cli"), "webui"],
        cwd=board_env["cwd"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 180
    while time.time() < deadline:
        if proc.poll() is not None:
            break
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.5)
    else:
        proc.kill()
    if proc.poll() is not None:
        pytest.fail("LLaMA-Board did not start:\n" + (board_env["root"] / "board.log").read_text()[-5000:])
    yield {"url": url, "log": board_env["root"] / "board.log"}
    os.killpg(proc.pid, signal.SIGTERM)  # the group this fixture started (the web UI and its training children)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
    log.close()


@pytest.fixture(scope="module")
def page(board):
    try:
        from playwright import sync_api
    except ImportError:
        pytest.fail("Playwright is missing: pip install -c constraints.txt -e '.[dev]'")
    if not os.path.isfile(CHROMIUM):
        pytest.fail(f"no Chromium at {CHROMIUM}: apt-get install chromium (or set AGENTIC_CHROMIUM)")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1440, "height": 1000})
        page = context.new_page()
        page.set_default_timeout(30_000)
        page.goto(board["url"])
        yield page
        browser.close()


# ---------------------------------------------------------------------------------------------- helpers
class Board:
    def __init__(self, page):
        self.page = page
        self.shots: list[Path] = []
        SCREENS.mkdir(parents=True, exist_ok=True)

    def shot(self, name: str, locator=None, at=None) -> None:
        r"""Screenshot of `locator`, or of the window scrolled so that `at` is at its top (LLaMA-Board's page is
        several thousand pixels tall once the training log fills)."""
        path = SCREENS / f"{len(self.shots) + 1:02d}_{name}.png"
        if at is not None:
            at.evaluate("e => { e.scrollIntoView({block: 'start'}); window.scrollBy(0, -60); }")
            self.page.wait_for_timeout(300)
        (locator or self.page).screenshot(path=str(path))
        self.shots.append(path)

    def field(self, label: str):
        return self.page.get_by_label(label).filter(visible=True).first

    def choose(self, label: str, option: str, exact_label: bool = True) -> None:
        box = self.page.get_by_label(label, exact=exact_label).filter(visible=True).first
        box.click()
        box.fill(option)
        self.page.get_by_role("option", name=option, exact=True).filter(visible=True).first.click()
        self.page.keyboard.press("Escape")
        self.page.wait_for_timeout(200)

    def fill(self, label: str, value) -> None:
        box = self.field(label)
        box.fill(str(value))
        box.blur()

    def agentic(self, name: str, value) -> None:
        root = self.page.locator(f"#ag-{name}")
        if isinstance(value, bool):
            root.locator("input[type=checkbox]").set_checked(value)
            return
        box = root.locator("input, textarea").first
        box.fill(str(value))
        box.blur()

    def agentic_value(self, name: str) -> str:
        return self.page.locator(f"#ag-{name}").locator("input, textarea").first.input_value()

    def click(self, text: str) -> None:
        self.page.get_by_role("button", name=text, exact=True).filter(visible=True).first.click()

    def checks(self) -> str:
        return self.page.locator("#agentic_checks").inner_text()

    def wait_text(self, locator, pattern: str, timeout: float = 60) -> str:
        deadline = time.time() + timeout
        text = ""
        while time.time() < deadline:
            text = locator.inner_text()
            if re.search(pattern, text):
                return text
            self.page.wait_for_timeout(250)
        raise AssertionError(f"{pattern!r} did not appear within {timeout}s; last text:\n{text[-3000:]}")

    def run_checks(self, pattern: str) -> str:
        box = self.page.locator("#agentic_checks")
        stamp = re.compile(r"Checks before Start · (\d\d:\d\d:\d\d)")
        before = stamp.search(box.inner_text())
        self.page.wait_for_timeout(1100)  # the title carries the time of the check, in seconds
        self.click("Run checks")
        deadline = time.time() + 90
        while time.time() < deadline:
            now = stamp.search(box.inner_text())
            if now and (before is None or now.group(1) != before.group(1)):
                break
            self.page.wait_for_timeout(250)
        return self.wait_text(box, pattern, timeout=5)


def test_arpo_from_llamaboard(page, board, board_env):
    ui = Board(page)
    output_box = page.locator(".agentic-output").first
    ui.wait_text(output_box, "Ready")

    # model: a local tiny policy (LLaMA-Board's "Custom" model name), full fine-tuning, qwen template
    ui.choose("Model name", "Custom")
    ui.fill("Model path", board_env["policy"])
    ui.choose("Finetuning method", "full")
    ui.choose("Chat template", "qwen")

    # 1. the plugin's stage: the agentic panel replaces the RLHF accordion; presets and output directory follow
    assert not page.locator("#agentic_checks").is_visible()
    ui.choose("Stage", "ARPO (agentic RL)")
    page.locator("#agentic_checks").wait_for(state="visible")
    assert not page.get_by_text("RLHF configurations", exact=True).is_visible()
    assert page.locator("#ag-arpo_beam_size input").get_attribute("placeholder") == "preset: 2"
    assert page.locator("#ag-agentic_max_tool_calls input").get_attribute("placeholder") == "preset: 3"
    assert ui.agentic_value("arpo_rollout_n") == "16"  # AgenticArguments' default
    assert "Group size M (arpo_rollout_n)" in page.locator("#ag-arpo_rollout_n").inner_text()  # the key is shown
    assert "Repair corrupted \\boxed (agentic_repair_boxed)" in page.locator("#ag-agentic_repair_boxed").inner_text()
    assert field_by_name("arpo_rollout_n").help in page.locator("#ag-arpo_rollout_n").inner_text()  # hparams help
    assert "Preset: arpo 2 · aepo 2 · aepo-paper 2" in page.locator("#ag-arpo_beam_size").inner_text()
    output_dir = page.get_by_label("Output dir", exact=True).filter(visible=True).first
    assert output_dir.input_value().startswith("arpo_")
    ui.shot("arpo_panel", page.locator("#agentic_panel"))

    # 2. datasets: the formats that fit the stage first, the others marked
    ui.fill("Data dir", board_env["datasets"])
    dataset_box = page.get_by_label("Dataset", exact=True).filter(visible=True).first
    dataset_box.click()
    options = page.get_by_role("option").filter(visible=True)
    options.first.wait_for()
    labels = [options.nth(i).inner_text() for i in range(options.count())]
    fitting = [i for i, label in enumerate(labels) if "not for arpo" not in label]
    assert fitting and max(fitting) < min(i for i, label in enumerate(labels) if "not for arpo" in label), labels
    assert any("arpo_sft_demo (arpo_sft: not for arpo)" in label for label in labels), labels
    ui.shot("dataset_list")
    page.get_by_role("option", name="arpo_rl_reasoning_10k_local", exact=True).click()
    page.keyboard.press("Escape")

    # 3. checks before Start: a mistyped key, a row with an empty ground truth, a batch that does not split
    page.get_by_text("Extra configurations", exact=True).click()
    extra = {"optim": "adamw_torch", "max_steps": 2, "logging_steps": 1, "preprocessing_num_workers": 1}
    ui.fill("Extra arguments", str({**extra, "arpo_rolout_n": 4, "eval_dataset": "sft_as_rl"}).replace("'", '"'))
    ui.agentic("agentic_search_index", board_env["root"] / "no_index")
    text = ui.run_checks("did you mean")
    assert "arpo_rolout_n is not a key" in text and "did you mean arpo_rollout_n" in text
    assert re.search(r"train_10k\.parquet row \d+: field reward_model\.ground_truth is empty", text), text
    assert "Skip bad rows" in text
    # an SFT file registered as arpo_rl: a format error naming what the rows look like, not "tick Skip bad rows"
    assert re.search(r"error dataset sft_as_rl is registered as formatting: arpo_rl, but none of its \d+ rows", text)
    assert "rows look like arpo_sft" in text, text
    # a missing search index is an error whose fix works for one's own documents
    assert "error local search index no corpus at" in text and "corpus.jsonl (one JSON object per line" in text
    assert "data/arpo/search_cache.json" not in text
    assert "error bf16 is set (Compute type bf16) but this machine has no device with bf16 support" in text
    ui.shot("checks_errors", page.locator("#agentic_checks"))
    page.locator("#agentic_checks").scroll_into_view_if_needed()
    ui.click("Start")  # refused: the checks' errors, not a failed training process
    ui.wait_text(output_box, "checks before Start found errors")

    # 4. fix everything in the panel (no key typed): the tiny recipe's settings
    ui.fill("Extra arguments", str(extra).replace("'", '"'))
    ui.fill("Max samples", 16)
    ui.choose("Compute type", "fp32")  # CPU
    for name, value in {
        "arpo_rollout_n": 4,
        "arpo_initial_rollouts": 2,
        "arpo_max_prompt_length": 2048,
        "arpo_max_response_length": 96,
        "arpo_rollout_batch_size": 2,
        "arpo_hf_generation_batch_size": 16,
        "rollout_temperature": 1.0,
        "rollout_top_p": 1.0,
        "rollout_top_k": 0,
        "arpo_rollout_log_ratio": 1.0,
        "agentic_search_index": board_env["search_index"],
        "agentic_cache_path": board_env["root"] / "tool_cache.sqlite",
        "agentic_max_tool_calls": 2,
        "agentic_python_timeout": 10,
        "agentic_tool_workers": 4,
        "agentic_skip_bad_rows": True,
    }.items():
        ui.agentic(name, value)
    text = ui.run_checks("optimiser update")  # 2 prompts x 4 = 8 trajectories; LLaMA-Board's 2 x 8 per update
    assert "8 trajectories per rollout must be a multiple of the trajectories per optimiser update" in text, text
    ui.fill("number input for Batch size", 8)
    ui.fill("number input for Gradient accumulation", 1)
    # the policy was fitted here, never through `stage: agentic_sft`: the checks warn that RL from it may have no
    # learning signal (issue 35); the marker agentic_sft leaves next to its model (written here by hand) clears it
    text = ui.run_checks("no sign of a cold start")
    assert "train stage: agentic_sft on tool trajectories first" in text, text  # Markdown: backticks rendered
    (board_env["policy"] / "agentic_sft.json").write_text("{}")
    text = ui.run_checks("No problems found")
    assert "error" not in text.lower().replace("errors", ""), text
    assert "2 x 4 trajectories for 1 optimiser update" in text
    ui.shot("checks_ok", page.locator("#agentic_checks"))

    # 5. preview: the command carries the panel's keys; the effective values include the presets
    ui.click("Preview command")
    preview = ui.wait_text(output_box, "Effective values")
    assert "--arpo_rollout_n 4" in preview and "--agentic_skip_bad_rows True" in preview
    assert "--arpo_beam_size" not in preview  # left to the preset
    assert re.search(r"arpo_beam_size +preset +2\n", preview), preview
    assert re.search(r"agentic_max_tool_calls +explicit +2\n", preview), preview
    assert re.search(r"agentic_tool_retries +preset +3\n", preview), preview
    # issue 29 item 1: the run planner's table (llamafactory-agentic plan) under the effective values
    assert "Run plan (`llamafactory-agentic plan`" in preview or "Run plan (llamafactory-agentic plan" in preview
    assert re.search(r"memory: fits +fits: ", preview) and "time: per rollout step" in preview, preview
    ui.shot("preview", output_box)

    # 6. save and load the arguments: the panel's fields round-trip
    ui.click("Save arguments")
    ui.wait_text(output_box, "saved")
    ui.agentic("arpo_rollout_n", 16)
    ui.click("Load arguments")
    ui.wait_text(output_box, "restored")
    deadline = time.time() + 20
    while ui.agentic_value("arpo_rollout_n") != "4" and time.time() < deadline:
        page.wait_for_timeout(250)
    assert ui.agentic_value("arpo_rollout_n") == "4"
    assert page.locator("#ag-agentic_skip_bad_rows input").is_checked()

    # 7. start a 2-step run: the rollout progress line, then the RL plots and the RL log line
    started = time.time()
    ui.click("Start")
    progress = page.locator("#agentic_rollout_progress")
    deadline = time.time() + 300
    while not re.search(r"[Rr]ollout (of|after) step \d+", progress.inner_text()) and time.time() < deadline:
        assert "Failed" not in output_box.inner_text(), output_box.inner_text()[-4000:]
        page.wait_for_timeout(200)
    ui.shot("running", at=page.locator(".agentic-output").first)
    finished = ui.wait_text(output_box, "Finished|Failed", timeout=300)
    assert "Finished" in finished, finished[-4000:]
    run_seconds = time.time() - started
    assert "✖" not in ui.checks(), ui.checks()  # the checks pressed with Start passed (a running job is no error)
    assert "'tool_calls'" in finished and "'reward'" in finished  # the RL line of every step
    assert "'identical_groups'" in finished  # the README's lead metric in the RL line
    plot = page.locator("#agentic_rl_plot")
    plot.locator("img").first.wait_for(timeout=30_000)  # the figure (the plot has no label icon: show_label off)
    ui.wait_text(progress, r"Last: (Validation rollout after|Rollout of) step \d+", timeout=30)  # the viewer's steps
    ui.shot("rl_plots", at=page.locator(".agentic-output").first)
    ui.shot("rl_plots_panel", plot)

    saves = board_env["cwd"] / "saves" / "Custom" / "full"
    run_dir = next(p for p in saves.iterdir() if p.name.startswith("arpo_"))
    # LLaMA-Board sets include_num_input_tokens_seen; an RL batch has no input_ids, and transformers logged "Tried to
    # track the number of tokens seen" at every step (issue 35): the RL stages turn the counter off
    assert "Tried to track the number of tokens seen" not in (run_dir / "running_log.txt").read_text()
    records = [line for line in (run_dir / "trainer_log.jsonl").read_text().splitlines() if '"loss"' in line]
    assert len(records) == 2 and all('"reward/mean"' in line for line in records)
    from llamafactory_agentic.webui.monitor import read_jsonl, rl_panels

    titles = [panel["title"] for panel in rl_panels(read_jsonl(str(run_dir / "trainer_log.jsonl")))]
    assert "identical-reward groups (share, rolled out)" in titles, titles  # drawn in the plot above

    # the reward-gaming monitor's warnings appear under the RL plot as soon as the trainer log holds one. Two steps
    # raise none (the monitor needs two windows of 10 rollout records), so the record the live monitor writes for the
    # recorded seed-0 run with the tool bonus (tests/guards/test_gaming.py) is appended as it would be written
    # every group of both rollouts had equal rewards (the tiny policy scores -1 everywhere): the live monitor says
    # there is no learning signal, with the cause and the fix, beside the plots (issue 35)
    warnings_box = page.locator("#agentic_rl_warnings")
    shown = ui.wait_text(warnings_box, r"no learning signal", timeout=30)
    assert "Run monitor" in shown and "1 warning(s)" in shown and "[no_learning_signal]" in shown, shown
    assert "stage: agentic_sft" in shown, shown
    ui.shot("no_signal", warnings_box)
    from guards.test_gaming import recorded_runs

    from llamafactory_agentic.guards.gaming import scan_records

    (raised,) = scan_records(recorded_runs("cpu")[("arpo", 0)], tool_bonus=0.1)
    with open(run_dir / "trainer_log.jsonl", "a", encoding="utf-8") as log:
        log.write(json.dumps({"current_steps": 2, "total_steps": 2, "warnings": [raised.message()]}) + "\n")
    shown = ui.wait_text(warnings_box, r"2 warning\(s\)", timeout=30)
    assert "step 2: reward gaming? [tool_calls_per_correct]" in shown and "agentic_reward_tool_bonus" in shown, shown
    ui.shot("rl_warnings", warnings_box)

    # the output directory now holds a finished run: the checks warn (Start would resume it past its end)
    text = ui.run_checks("finished run")
    assert f"{run_dir.name} holds a finished run (step 2 of 2)" in text, text
    assert "No problems found" not in text

    # 8. the rollout viewer: pick a rollout, see each group as a branch tree
    page.get_by_text("Rollout viewer", exact=True).click()
    viewer = page.locator("#agentic_rollout_html")
    ui.wait_text(viewer, "Group 0", timeout=30)
    ui.choose("Rollout", "step 1 · 2 groups")
    text = ui.wait_text(viewer, r"Rollout of step 1 · 2 logged groups", timeout=30)
    assert "global rollout" in text and "reward" in text and "ΔH" in text
    assert "branch of #" in text  # the fitted policy calls tools, so ARPO branches after a call
    ui.shot("rollout_viewer", page.locator("#agentic_rollout_viewer"))

    # 9. agentic SFT: its own group, no rollout fields, no RL monitor, its own output directory
    ui.choose("Stage", "Agentic SFT (tool trajectories)")
    page.locator("#ag-agentic_sft_mask_results").wait_for(state="visible")
    assert not page.locator("#ag-arpo_rollout_n").is_visible() and not page.locator("#agentic_rl_plot").is_visible()
    assert not page.locator("#ag-agentic_repair_boxed").is_visible()  # an RL-only field of the shared Data group
    assert "(<result>...</result>, tags included)" in page.locator("#ag-agentic_sft_mask_results").inner_text()
    assert output_dir.input_value().startswith("agentic_sft_")
    assert "The stage changed to agentic_sft" in ui.checks() and "finished run" not in ui.checks()
    deadline = time.time() + 10  # no RL line under SFT's progress bar (gradio may show its timer for a moment)
    while "ollout" in page.locator("#agentic_rollout_progress").inner_text() and time.time() < deadline:
        page.wait_for_timeout(250)
    assert "ollout" not in page.locator("#agentic_rollout_progress").inner_text()

    # 9b. back to ARPO: a new output directory, not the finished run; then AEPO names the typed values it keeps
    ui.choose("Stage", "ARPO (agentic RL)")
    page.locator("#ag-arpo_rollout_n").wait_for(state="visible")
    deadline = time.time() + 10
    while not output_dir.input_value().startswith("arpo_") and time.time() < deadline:
        page.wait_for_timeout(250)
    assert output_dir.input_value().startswith("arpo_") and output_dir.input_value() != run_dir.name
    ui.choose("Stage", "AEPO (agentic RL)")
    ui.wait_text(page.locator("#agentic_checks"), "The stage changed to aepo", timeout=20)
    kept = ui.checks()
    assert "replace the aepo preset:" in kept and "agentic_max_tool_calls 2 (preset 6)" in kept, kept
    ui.shot("aepo_kept_values", page.locator("#agentic_checks"))
    ui.choose("Stage", "ARPO (agentic RL)")
    page.locator("#ag-arpo_rollout_n").wait_for(state="visible")

    # 9c. abort during a rollout: the output box says Aborted, not Finished.
    ui.fill("Extra arguments", str({**extra, "max_steps": 50}).replace("'", '"'))  # still running at the abort
    if not dataset_box.input_value():  # LLaMA-Board's stage switch renews the dataset choices (and drops the choice)
        dataset_box.click()
        page.get_by_role("option", name="arpo_rl_reasoning_10k_local", exact=True).click()
        page.keyboard.press("Escape")
    ui.click("Start")
    deadline = time.time() + 300
    while not re.search(r"↻ (Rollout of|Validation rollout after) step \d+", progress.inner_text()):
        text = output_box.inner_text()  # (the former run's log stays until the new run writes its own)
        assert time.time() < deadline and not re.search("found errors|Please", text), (
            f"no running rollout; output box:\n{text[-3000:]}\nchecks:\n{ui.checks()}"
        )
        page.wait_for_timeout(200)
    ui.click("Abort")
    aborted = ui.wait_text(output_box, r"^(Aborted[. ]|Finished\.|Failed)", timeout=120)  # not "Aborted, wait..."
    assert aborted.startswith("Aborted") and not aborted.startswith("Finished"), aborted[-3000:]
    ui.shot("aborted", output_box)
    # issue 34 medium 13: LLaMA-Factory's LogCallback stops after the step it is in and the model of that step is
    # saved; the box said "no final model was saved", the checks promised a resume and Start then failed with
    # `overwrite_output_dir`. Now the box names the step and what Start does; the checks refuse the folder first.
    assert "no final model was saved" not in aborted, aborted[:800]
    assert re.match(r"Aborted at step \d+\. The trainer stopped after that step and saved its model", aborted)
    assert "Start with this output directory is refused" in aborted, aborted[:800]
    ui.run_checks(r"no complete checkpoint to resume from")
    ui.click("Start")
    # (the box still holds the aborted run's log until Start answers: wait for the answer itself)
    blocked = ui.wait_text(output_box, r"found errors|Please set `overwrite_output_dir`|Resuming training", timeout=60)
    assert "The checks before Start found errors" in blocked and "no complete checkpoint" in blocked, blocked[-2000:]
    assert "Please set `overwrite_output_dir`" not in blocked
    ui.choose("Stage", "Agentic SFT (tool trajectories)")
    page.locator("#ag-agentic_sft_mask_results").wait_for(state="visible")

    # 10. LLaMA-Board's language switch relabels the panel
    ui.choose("Language", "zh")
    ui.wait_text(page.locator("#ag-agentic_sft_mask_results"), "屏蔽工具结果", timeout=20)
    ui.shot("agentic_sft_zh", page.locator("#agentic_panel"))

    print(f"\n[webui] run took {run_seconds:.1f}s; screenshots:\n" + "\n".join(str(p) for p in ui.shots))
