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

"""`report.html` in a real headless Chromium (Debian's `chromium`, driven by Playwright; no browser download).

The run behind the report is served by the local fake OpenAI-compatible server (policy and judge) so that it holds
right and wrong answers, tool calls, notices, a judge that disagrees with exact match, and a question carrying a
script tag that must stay text.
"""

import json
import os
import shutil

import pytest

from llamafactory_agentic.evaluation import evaluate

from .fake_openai import FakeOpenAIServer
from .helpers import SCRIPTS, base_config, judge_by_prediction, scripted_policy, write_jsonl


CHROMIUM = os.environ.get("AGENTIC_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
LAUNCH_ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--no-first-run", "--disable-sync", "--disable-quic"]  # fmt: skip
EVIL = "Who wrote </script><script>window.pwned = 1</script> <b>this</b>?"


@pytest.fixture(scope="module")
def report(tmp_path_factory, tiny_model_dir, tiny_tokenizer):
    tmp = tmp_path_factory.mktemp("report")
    scripts = {**SCRIPTS, EVIL: ["<think> x </think> <answer> \\boxed{me} </answer>"]}
    judge = judge_by_prediction({"Ottawa, Ontario": "Correct", "1000": "Incorrect", "Spain": "Incorrect"})
    with FakeOpenAIServer(tiny_tokenizer, scripted_policy(scripts), judge) as server:
        config = base_config(tmp, tiny_model_dir, server.url, eval_judge_base_url=server.url, eval_judge_model="j")
        write_jsonl(tmp / "data" / "evil.jsonl", [{"question": EVIL, "answer": "me"}])
        config["eval_benchmarks"].append({"name": "evil", "path": str(tmp / "data" / "evil.jsonl")})
        metrics = evaluate(config)
    return tmp / "out" / "report.html", metrics


@pytest.mark.browser
def test_report_in_headless_chromium(report):
    from playwright.sync_api import sync_playwright

    path, metrics = report
    scored = [json.loads(x) for x in (path.parent / "scored.jsonl").read_text().splitlines()]
    wrong = sum(not r["headline"]["correct"] for r in scored)
    errors = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        page = browser.new_page()
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
        page.goto(path.as_uri())
        assert page.title() == "Evaluation of tiny-qwen20"
        rows = page.locator("#benchmarks tbody tr")
        assert rows.count() == 3 and rows.nth(0).locator("td").first.inner_text() == "mymath"
        assert page.locator("#fingerprint").inner_text() == metrics["fingerprint"]
        assert page.locator("#count").inner_text().startswith(f"{len(scored)} of {len(scored)} trajectories")
        assert page.locator("details.card").count() == len(scored)

        page.check("#f-wrong")
        assert page.locator("details.card").count() == wrong
        assert page.locator("details.card summary .ok").count() == 0
        page.uncheck("#f-wrong")
        page.check("#f-disagree")  # the judge said correct where exact match said no: Ottawa, Ontario (both runs)
        cards = page.locator("details.card")
        assert cards.count() == 2 and "Ottawa, Ontario" in cards.first.inner_text()
        page.uncheck("#f-disagree")

        page.select_option("#f-bench", "mymath")
        page.fill("#f-text", "17 + 25")
        card = page.locator("details.card").first
        assert page.locator("details.card").count() == 2
        card.locator("summary").click()
        card.locator(".response").wait_for()  # the body is built when the card opens
        assert card.locator(".tag-python").count() == 2 and card.locator(".tag-answer").count() == 2
        assert card.locator(".tag-think").count() >= 2 and card.locator(".in-python").first.inner_text().strip() == (
            "print(17 + 25)"
        )
        obs = [t.strip() for t in card.locator(".obs").all_inner_texts() if t.strip()]
        assert obs == ["42"]  # the observation between the result tags, styled as tool output
        cells = card.locator("table.calls td")
        assert [cells.nth(i).inner_text() for i in range(1, 5)] == ["python", "print(17 + 25)", "ok", "miss"]
        colour = card.locator(".tag-python").first.evaluate("e => getComputedStyle(e).backgroundColor")
        assert colour == "rgb(130, 80, 223)"

        page.fill("#f-text", "")
        page.select_option("#f-bench", "myqa")
        page.fill("#f-text", "Canada")
        canada = page.locator("details.card").first
        canada.locator("summary").click()
        canada.locator(".response").wait_for()
        assert "This search call repeats an earlier one" in canada.locator(".response").inner_text()
        assert "Judge: correct (judge)" in canada.inner_text()

        page.select_option("#f-bench", "evil")
        page.fill("#f-text", "")
        evil = page.locator("details.card").first
        evil.locator("summary").click()
        evil.locator(".response").wait_for()
        assert EVIL in evil.inner_text()  # shown as text
        assert page.evaluate("typeof window.pwned") == "undefined" and page.locator("b").count() == 0
        browser.close()
    assert errors == []
