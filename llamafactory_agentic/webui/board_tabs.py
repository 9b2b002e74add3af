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

r"""The gradio side of the plugin in LLaMA-Board's Chat and Evaluate & Predict tabs.

`llamafactory_agentic.integration.llamaboard` wraps LLaMA-Board's `create_chat_box`; after it, `add_chat_tools`
adds, inside the chat box, a *Tools* accordion (*Run tools* switch, tool config, local search index, call limit,
python timeout) and, under the chat, the last answer drawn as the rollout viewer draws a trajectory. LLaMA-Board's
Submit button is replaced by one with the same label whose event appends the question as LLaMA-Board does and then
answers with LLaMA-Board's own stream (*Run tools* off) or with the agent loop (`webui.chat.agentic_answer`).

`add_eval_panel` adds to the Evaluate & Predict tab the *Agentic evaluation* accordion: an evaluation config, the
preset, benchmarks, runs, tokens per call, output directory and more `key=value` keys; its button runs
`llamafactory-agentic eval` (`webui.evaluate`) on the model of the top row and shows the run's summary and report.
"""

import os
from collections.abc import Generator
from typing import Any

import gradio as gr

from .chat import (
    BUILTIN_TOOLS,
    ChatTools,
    agentic_answer,
    checkpoint_chat_settings,
    checkpoint_folders,
    tool_config_choices,
)
from .fields import SEARCH_BACKENDS
from .locales import message
from .rollouts import render_chat_turn


def _move_after(block: Any, anchor: Any) -> None:
    block.parent.children.remove(block)
    container = anchor.parent
    container.children.insert(container.children.index(anchor) + 1, block)
    block.parent = container


def build_chat_tools(locales: dict[str, Any]) -> dict[str, Any]:
    r"""The chat's tool settings in the current gradio context (labels from `locales`, English first)."""

    def text(name: str) -> dict[str, str]:
        return {key: value for key, value in locales[name]["en"].items() if key in ("label", "info")}

    with gr.Accordion(open=True, elem_id="agentic_chat_tools", **text("agentic_chat_tab")) as tab:
        with gr.Row():
            run_tools = gr.Checkbox(value=False, elem_id="agentic_chat_run_tools", **text("agentic_chat_run_tools"))
            tool_config = gr.Dropdown(
                choices=tool_config_choices(),
                value=BUILTIN_TOOLS,
                allow_custom_value=True,
                scale=2,
                elem_id="agentic_chat_tool_config",
                **text("agentic_chat_tool_config"),
            )
            search_index = gr.Textbox(elem_id="agentic_chat_search_index", **text("agentic_chat_search_index"))
            max_calls = gr.Number(
                value=ChatTools.max_tool_calls,
                precision=0,
                minimum=0,
                elem_id="agentic_chat_max_calls",
                **text("agentic_chat_max_calls"),
            )
            python_timeout = gr.Number(
                value=ChatTools.python_timeout,
                minimum=1,
                elem_id="agentic_chat_python_timeout",
                **text("agentic_chat_python_timeout"),
            )
        with gr.Row():
            search_backend = gr.Dropdown(
                choices=list(SEARCH_BACKENDS),
                value=ChatTools.search_backend,
                elem_id="agentic_chat_search_backend",
                **text("agentic_chat_search_backend"),
            )
            search_topk = gr.Number(
                value=ChatTools.search_topk,
                precision=0,
                minimum=1,
                elem_id="agentic_chat_search_topk",
                **text("agentic_chat_search_topk"),
            )
            source = gr.Markdown("", elem_id="agentic_chat_source")
    trace = gr.HTML("", elem_id="agentic_chat_trace")
    submit = gr.Button(
        variant="primary", elem_id="agentic_chat_submit", value=locales["agentic_chat_submit_btn"]["en"]["value"]
    )
    return {
        "agentic_chat_tab": tab,
        "agentic_chat_run_tools": run_tools,
        "agentic_chat_tool_config": tool_config,
        "agentic_chat_search_index": search_index,
        "agentic_chat_max_calls": max_calls,
        "agentic_chat_python_timeout": python_timeout,
        "agentic_chat_search_backend": search_backend,
        "agentic_chat_search_topk": search_topk,
        "agentic_chat_source": source,
        "agentic_chat_trace": trace,
        "agentic_chat_submit_btn": submit,
    }


def add_chat_tools(engine: Any, chatbot: Any, messages: Any, elems: dict[str, Any]) -> dict[str, Any]:
    r"""Add the tool settings and the answer view to LLaMA-Board's chat box and take over its Submit button.

    Args:
        engine: LLaMA-Board's engine (`engine.chatter` is its `WebChatModel`).
        chatbot: The chat's `gr.Chatbot`.
        messages: The chat's message state.
        elems: The other components of `create_chat_box` (`chat_box`, `submit_btn`, `query`, ...).

    Returns:
        The new components by element name (they join the Chat tab's elements, so the language switch relabels them).
    """
    from .locales import build_locales

    locales = build_locales()
    with elems["chat_box"]:
        added = build_chat_tools(locales)
    _move_after(added["agentic_chat_trace"], chatbot)
    _move_after(added["agentic_chat_submit_btn"], elems["submit_btn"])
    _move_after(added["agentic_chat_tab"], added["agentic_chat_submit_btn"])
    chatbot.elem_id = chatbot.elem_id or "agentic_chatbot"
    elems["submit_btn"].visible = False  # LLaMA-Board's button: its event streams without tools
    lang = engine.manager.get_elem_by_id("top.lang")
    chatter = engine.chatter

    def answer(
        chatbot_value, messages_value, lang_value, system, tools, image, video, audio, max_new_tokens, top_p,
        temperature, skip_special_tokens, escape_html, enable_thinking, run_tools, tool_config, search_index,
        max_calls, python_timeout, search_backend, search_topk,
    ) -> Generator[tuple, None, None]:  # fmt: skip
        if not run_tools:
            for bot, msgs in chatter.stream(
                chatbot_value, messages_value, lang_value, system, tools, image, video, audio, max_new_tokens, top_p,
                temperature, skip_special_tokens, escape_html, enable_thinking,
            ):  # fmt: skip
                yield bot, msgs, gr.skip()
            return
        yield from tool_answer(
            chatter, chatbot_value, messages_value, lang_value, system, max_new_tokens, top_p, temperature,
            skip_special_tokens, escape_html,
            ChatTools(
                str(tool_config or ""), str(search_index or ""), int(max_calls or 0), float(python_timeout or 30),
                int(search_topk or ChatTools.search_topk), str(search_backend or ChatTools.search_backend),
            ),
        )  # fmt: skip

    e = elems
    added["agentic_chat_submit_btn"].click(
        chatter.append, [chatbot, messages, e["role"], e["query"], e["escape_html"]], [chatbot, messages, e["query"]]
    ).then(
        answer,
        [
            chatbot,
            messages,
            lang,
            e["system"],
            e["tools"],
            e["image"],
            e["video"],
            e["audio"],
            e["max_new_tokens"],
            e["top_p"],
            e["temperature"],
            e["skip_special_tokens"],
            e["escape_html"],
            e["enable_thinking"],
            added["agentic_chat_run_tools"],
            added["agentic_chat_tool_config"],
            added["agentic_chat_search_index"],
            added["agentic_chat_max_calls"],
            added["agentic_chat_python_timeout"],
            added["agentic_chat_search_backend"],
            added["agentic_chat_search_topk"],
        ],  # fmt: skip
        [chatbot, messages, added["agentic_chat_trace"]],
    )
    e["clear_btn"].click(lambda: "", outputs=[added["agentic_chat_trace"]])
    return added


CHAT_FIELDS = ("tool_config", "search_backend", "search_index", "search_topk", "max_calls", "python_timeout")


def checkpoint_updates(
    lang: str | None, model_name: str | None, model_path: str | None, finetuning_type: str | None, checkpoints: Any
) -> tuple[Any, ...]:
    r"""The Chat's tool fields and system prompt as the loaded checkpoint was trained (`chat.checkpoint_chat_settings`).

    Returns:
        One value per field of `CHAT_FIELDS`, then the system prompt, then the source line: the recorded value, or
        `gr.skip()` (the field keeps what it holds) for a key the checkpoint's `agentic_config.json` does not record.
    """
    from llamafactory.webui.common import get_save_dir

    folders = checkpoint_folders(
        model_path, finetuning_type, checkpoints, lambda name: get_save_dir(model_name or "", finetuning_type, name)
    )
    try:
        settings, path = checkpoint_chat_settings(folders)
    except ValueError as err:  # EvalConfigError: not valid JSON (named, never shown)
        return (*(gr.skip() for _ in CHAT_FIELDS), gr.skip(), f"✖ {err}")
    names = {"max_calls": "max_tool_calls"}
    values = [settings.get(names.get(field, field), gr.skip()) for field in CHAT_FIELDS]
    system = settings.get("system_prompt", gr.skip())
    shown = message("chat_from_checkpoint", lang, path=path) if path else message("chat_no_checkpoint_config", lang)
    return (*values, system, shown)


def wire_checkpoint_settings(engine: Any, elems: dict[str, Any]) -> None:
    r"""Fill the Chat's tool fields and system prompt from the checkpoint when *Load model* is pressed.

    Args:
        engine: LLaMA-Board's engine (its manager holds the top row).
        elems: The Infer tab's components (`load_btn`, `system` and the `agentic_chat_*` fields).
    """
    manager = engine.manager
    top = [manager.get_elem_by_id(f"top.{name}") for name in (
        "lang", "model_name", "model_path", "finetuning_type", "checkpoint_path")]  # fmt: skip
    outputs = [elems[f"agentic_chat_{name}"] for name in CHAT_FIELDS] + [elems["system"], elems["agentic_chat_source"]]
    elems["load_btn"].click(checkpoint_updates, top, outputs)


def tool_answer(
    chatter: Any,
    chatbot: list[dict[str, str]],
    messages: list[dict[str, str]],
    lang: str | None,
    system: str | None,
    max_new_tokens: int,
    top_p: float,
    temperature: float,
    skip_special_tokens: bool,
    escape_html: bool,
    settings: ChatTools,
) -> Generator[tuple[list, list, str], None, None]:
    r"""The chat's answer with tools: `(chatbot, messages, answer HTML)` while running and when done.

    The answer (tool calls and observations included) joins the conversation, so the next question sees them. A bad
    tool setting or a backend without a model in this process is answered with its message, nothing is generated.
    """
    chatbot = chatbot + [{"role": "assistant", "content": message("chat_running", lang)}]
    yield chatbot, messages, gr.skip()
    try:
        record = agentic_answer(
            chatter.engine, messages, system, settings, max_new_tokens, temperature, top_p, skip_special_tokens
        )
    except (
        ValueError,
        KeyError,
        OSError,
        RuntimeError,
    ) as err:  # a bad tool config, an index, a sandbox below minimum
        text = message("chat_failed", lang, error=str(err))
        gr.Warning(text)
        chatbot[-1] = {"role": "assistant", "content": text}
        yield chatbot, messages, ""
        return
    response = record["response"]
    shown = response.replace("<", "&lt;").replace(">", "&gt;") if escape_html else response
    chatbot[-1] = {"role": "assistant", "content": shown}
    messages = messages + [{"role": "assistant", "content": record["history"]}]
    yield chatbot, messages, render_chat_turn(record, title=message("chat_trace_title", lang))


# ---------------------------------------------------------------------------------------------- Evaluate & Predict
def build_eval_panel(locales: dict[str, Any]) -> dict[str, Any]:
    r"""The agentic Evaluate panel in the current gradio context (labels from `locales`, English first)."""
    from .evaluate import PRESETS, eval_config_choices

    def text(name: str, *props: str) -> dict[str, str]:
        return {key: value for key, value in locales[name]["en"].items() if key in (props or ("label", "info"))}

    configs = eval_config_choices()
    with gr.Accordion(open=True, elem_id="agentic_eval_panel", **text("agentic_eval_tab")) as tab:
        with gr.Row():
            config = gr.Dropdown(
                choices=configs, value=configs[0][1], allow_custom_value=True, scale=3,
                elem_id="agentic_eval_config", **text("agentic_eval_config"),
            )  # fmt: skip
            preset = gr.Dropdown(
                choices=list(PRESETS), value="paper", elem_id="agentic_eval_preset", **text("agentic_eval_preset")
            )
            benchmarks = gr.Textbox(elem_id="agentic_eval_benchmarks", scale=2, **text("agentic_eval_benchmarks"))
        with gr.Row():
            # text fields: empty means the config's value, which gradio's Number cannot hold (an empty Number is sent
            # as 0 and refused by its minimum before the panel sees it, with a toast naming no field)
            runs = gr.Textbox(elem_id="agentic_eval_runs", **text("agentic_eval_runs"))
            max_new = gr.Textbox(elem_id="agentic_eval_max_new", **text("agentic_eval_max_new"))
            output_dir = gr.Textbox(
                value="agentic_eval", elem_id="agentic_eval_output_dir", **text("agentic_eval_output_dir")
            )
            extra = gr.Textbox(elem_id="agentic_eval_extra", scale=2, **text("agentic_eval_extra"))
        run_btn = gr.Button(variant="primary", elem_id="agentic_eval_btn", **text("agentic_eval_btn", "value"))
        status = gr.Markdown("", elem_id="agentic_eval_status", elem_classes=["agentic-output"])
        summary = gr.Markdown("", elem_id="agentic_eval_summary")
        report = gr.File(interactive=False, elem_id="agentic_eval_report", **text("agentic_eval_report"))
    return {
        "agentic_eval_tab": tab,
        "agentic_eval_config": config,
        "agentic_eval_preset": preset,
        "agentic_eval_benchmarks": benchmarks,
        "agentic_eval_runs": runs,
        "agentic_eval_max_new": max_new,
        "agentic_eval_output_dir": output_dir,
        "agentic_eval_extra": extra,
        "agentic_eval_btn": run_btn,
        "agentic_eval_status": status,
        "agentic_eval_summary": summary,
        "agentic_eval_report": report,
    }


def add_eval_panel(engine: Any) -> dict[str, Any]:
    r"""Build the agentic Evaluate panel (at the end of the Evaluate & Predict tab) and wire its Run button.

    Returns:
        The panel's components by element name (they join the tab's elements).
    """
    from .locales import build_locales

    panel = build_eval_panel(build_locales())
    manager = engine.manager
    top = [manager.get_elem_by_id(f"top.{name}") for name in (
        "lang", "model_name", "model_path", "template", "finetuning_type", "checkpoint_path")]  # fmt: skip
    fields = [panel[f"agentic_eval_{name}"] for name in (
        "config", "preset", "benchmarks", "runs", "max_new", "output_dir", "extra")]  # fmt: skip
    panel["agentic_eval_btn"].click(
        run_eval_panel,
        [*top, *fields],
        [panel["agentic_eval_status"], panel["agentic_eval_summary"], panel["agentic_eval_report"]],
        concurrency_limit=None,
    )
    return panel


def run_eval_panel(
    lang: str | None, model_name: str | None, model_path: str | None, template: str | None, finetuning_type: str,
    checkpoints: Any, config: str | None, preset: str, benchmarks: str, runs: str, max_new: str, output_dir: str,
    extra: str,
) -> Generator[tuple[str, Any, Any], None, None]:  # fmt: skip
    r"""Run `llamafactory-agentic eval` for the panel; yield `(status, summary, report)` while it runs and at the end.

    The status shows the command and the tail of its output (every second); at the end the summary is the run's
    `summary.md` and the report its `report.html` (a download link, its path in the status).
    """
    import subprocess
    import time

    from llamafactory.webui.common import get_save_dir

    from .evaluate import LOG_NAME, checked_eval_config, eval_command, model_overrides, panel_overrides, read_result

    if not model_path:
        yield message("eval_no_model", lang), "", None
        return
    try:
        config = checked_eval_config(config)
    except ValueError as err:
        yield f"✖ {err}", "", None
        return
    if config and not os.path.isfile(config):
        yield message("eval_no_config", lang, config=config), "", None
        return
    out_dir = os.path.abspath(get_save_dir(model_name or "", finetuning_type or "", output_dir or "agentic_eval"))
    try:
        overrides = model_overrides(
            model_path, template, finetuning_type, checkpoints,
            lambda name: get_save_dir(model_name or "", finetuning_type, name),
        ) + panel_overrides(preset, benchmarks, runs, max_new, out_dir, extra)  # fmt: skip
    except ValueError as err:
        yield f"✖ {err}", "", None
        return
    command = eval_command(config, overrides)
    os.makedirs(out_dir, exist_ok=True)
    log_path = os.path.join(out_dir, LOG_NAME)
    shown = "```\n" + " ".join(command) + "\n```"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)  # noqa: S603
        while proc.poll() is None:
            yield f"{message('eval_running', lang)}\n\n{shown}\n\n```\n{_tail(log_path)}\n```", gr.skip(), gr.skip()
            time.sleep(1.0)
    summary, report = read_result(out_dir)
    tail = _tail(log_path)
    head = message("eval_done" if proc.returncode == 0 else "eval_failed", lang, rc=proc.returncode, path=out_dir)
    where = f"\n\n{message('eval_report', lang, path=report)}" if report else ""
    yield f"{head}{where}\n\n{shown}\n\n```\n{tail}\n```", summary or "", report


def _tail(path: str, lines: int = 25) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return ""
    text = text.replace("\r", "\n")  # progress bars
    kept = [line for line in text.splitlines() if line.strip()][-lines:]
    return "\n".join(kept).replace("```", "'''")
