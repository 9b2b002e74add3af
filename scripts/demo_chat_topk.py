# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""The demo's ARPO model in LLaMA-Board's Chat, by hand (issue 35; docs/llamaboard.md "The demo's model in Chat").

Starts `llamafactory-cli webui` on 127.0.0.1 in the demo's folder, drives it in headless Chromium (Playwright,
Debian's chromium), loads the ARPO checkpoint in the Chat tab (*Load model* fills the Tools fields from its
`agentic_config.json`), asks QUESTION with *Run tools* on, then again with 10 typed into *Snippets per search*, and
prints both answers; screenshots go to --shots. Usage (after `llamafactory-agentic demo --workdir DIR`):

    python scripts/demo_chat_topk.py --demo-dir DIR --question "In which city does employee #5218 work?"

The tests run the same path on a tiny checkpoint (tests/webui/test_llamaboard_chat_eval_browser.py
::test_chat_search_topk_from_checkpoint); this script is for the real demo model, which takes minutes to train.
"""

import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _answer(page, question: str, timeout: float = 300) -> str:
    rows = page.locator("#agentic_chatbot .message-row")
    page.get_by_role("button", name="Clear history", exact=True).filter(visible=True).first.click()
    page.wait_for_function("document.querySelectorAll('#agentic_chatbot .message-row').length === 0")
    page.get_by_placeholder("Input...").filter(visible=True).first.fill(question)
    page.locator("#agentic_chat_submit").click()
    deadline = time.time() + timeout
    while time.time() < deadline:
        if rows.count() >= 2:
            text = rows.nth(rows.count() - 1).inner_text()
            if "</answer>" in text or "finish" in page.locator("#agentic_chat_trace").inner_text():
                return text
        page.wait_for_timeout(500)
    raise TimeoutError("no answer in time")


def main() -> int:
    r"""Run the check; print the Tools fields after Load model and both answers."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--demo-dir", required=True, type=Path, help="the demo's --workdir (holds arpo/ and data/)")
    parser.add_argument("--question", required=True)
    parser.add_argument("--checkpoint", default="arpo", help="the checkpoint folder under --demo-dir")
    parser.add_argument("--shots", type=Path, default=Path("saves/demo_chat_shots"))
    parser.add_argument("--chromium", default=os.environ.get("AGENTIC_CHROMIUM", "/usr/bin/chromium"))
    args = parser.parse_args()
    from playwright import sync_api

    demo = args.demo_dir.resolve()
    args.shots.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    env = dict(os.environ, GRADIO_SERVER_NAME="127.0.0.1", GRADIO_SERVER_PORT=str(port), BROWSER="true",
               GRADIO_ANALYTICS_ENABLED="False", CUDA_VISIBLE_DEVICES="", HF_HUB_OFFLINE="1")  # fmt: skip
    cli = str(Path(sys.executable).parent / "llamafactory-cli")
    with open(args.shots / "board.log", "w") as log:
        board = subprocess.Popen([cli, "webui"], cwd=demo, env=env, stdout=log, stderr=subprocess.STDOUT,
                                 start_new_session=True)  # fmt: skip
    try:
        for _ in range(360):
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.5)
        with sync_api.sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=args.chromium, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1440, "height": 1000})
            page.set_default_timeout(60_000)
            page.goto(f"http://127.0.0.1:{port}")

            def choose(label: str, option: str) -> None:
                box = page.get_by_label(label, exact=True).filter(visible=True).first
                box.click()
                box.fill(option)
                page.get_by_role("option", name=option, exact=True).filter(visible=True).first.click()
                page.keyboard.press("Escape")

            choose("Model name", "Custom")
            path = page.get_by_label("Model path").filter(visible=True).first
            path.fill(str(demo / args.checkpoint))
            path.blur()
            choose("Finetuning method", "full")
            choose("Chat template", "qwen")
            page.get_by_role("tab", name="Chat").click()
            page.get_by_role("button", name="Load model", exact=True).filter(visible=True).first.click()
            page.locator("#agentic_chat_submit").wait_for(state="visible", timeout=300_000)
            for _ in range(120):
                if re.search(
                    r"as the checkpoint was trained|no agentic_config",
                    page.locator("#agentic_chat_source").inner_text(),
                ):
                    break
                page.wait_for_timeout(250)
            fields = {name: page.locator(f"#agentic_chat_{name} input, #agentic_chat_{name} textarea").first.input_value()
                      for name in ("search_topk", "search_backend", "search_index", "max_calls")}  # fmt: skip
            print("after Load model:", fields, "|", page.locator("#agentic_chat_source").inner_text().strip())
            page.locator("#agentic_chat_run_tools input[type=checkbox]").set_checked(True)
            for topk in (None, "10"):
                if topk is not None:
                    box = page.locator("#agentic_chat_search_topk input").first
                    box.fill(topk)
                    box.blur()
                answer = _answer(page, args.question)
                shown = fields["search_topk"] if topk is None else topk
                print(f"\n=== top-k {shown}:\n{answer}")
                page.locator("#agentic_chatbot").scroll_into_view_if_needed()
                page.locator("#agentic_chatbot").screenshot(path=str(args.shots / f"demo_chat_topk{shown}.png"))
            browser.close()
    finally:
        os.killpg(board.pid, signal.SIGTERM)
        board.wait(timeout=60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
