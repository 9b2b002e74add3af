# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""RL plots from trainer_log.jsonl (zeros kept), the rollout progress line, and LLaMA-Board's patched loss plot."""

import json
import time

from llamafactory_agentic.webui.monitor import loss_figure, progress_line, read_jsonl, rl_figure, rl_panels


# two training steps fed by one rollout (its metrics only on step 1), then a validation record
LOG = [
    {"current_steps": 1, "loss": 0.0, "reward": 0.0, "reward/mean": 0.0, "reward/accuracy": 0.0,
     "reward/identical_groups": 0.5, "rollout/tool_calls_per_traj": 1.5, "rollout/branches": 2.0,
     "rollout/response_length": 80.0,
     "loss/entropy": 0.4, "loss/approx_kl": 0.0, "loss/clip_frac": 0.0, "aepo/grad_preserved_frac": 0.0},
    {"current_steps": 2, "loss": 0.0, "loss/entropy": 0.38, "loss/approx_kl": 1e-7, "loss/clip_frac": 0.0,
     "aepo/grad_preserved_frac": 0.0},
    {"current_steps": 2, "eval_reward": 0.5, "eval_reward/accuracy": 0.5},
]  # fmt: skip


def test_panels_keep_zeros_and_use_the_rollout_steps():
    panels = {p["title"]: p for p in rl_panels(LOG)}
    assert list(panels) == [
        "reward (mean)",
        "accuracy",
        "identical-reward groups (share, rolled out)",
        "tool calls / trajectory",
        "branches / rollout",
        "entropy (trained tokens)",
        "response length (tokens)",
        "KL (approx., rl_kl_coef = 0)",
        "clip fraction",
    ]
    assert panels["reward (mean)"]["values"] == [0.0] and panels["reward (mean)"]["eval_values"] == [0.5]
    assert panels["clip fraction"]["steps"] == [1, 2] and panels["clip fraction"]["values"] == [0.0, 0.0]
    assert panels["entropy (trained tokens)"]["values"] == [0.4, 0.38]
    with_kl = [dict(LOG[0], **{"loss/kl": 0.01})]
    assert {p["key"] for p in rl_panels(with_kl)} >= {"loss/kl"}  # the real KL when rl_kl_coef > 0
    assert "AEPO: gradient-preserved clip fraction" in [p["title"] for p in rl_panels(LOG, aepo=True)]


def test_identical_groups_have_their_panels():
    # issue 24 medium 9: the README's lead metric was in trainer_log.jsonl but in no panel of the live RL plot
    panels = {p["key"]: p for p in rl_panels(LOG)}
    assert panels["reward/identical_groups"]["steps"] == [1] and panels["reward/identical_groups"]["values"] == [0.5]
    assert "dynamic_sampling/identical_groups_in_update" not in panels  # only with rl_dynamic_sampling
    dynamic = [dict(LOG[0], **{"dynamic_sampling/identical_groups_in_update": 0.0})]
    (panel,) = [p for p in rl_panels(dynamic) if p["key"] == "dynamic_sampling/identical_groups_in_update"]
    assert panel["title"] == "identical-reward groups (share, in the update)" and panel["values"] == [0.0]
    titles = [ax.get_title() for ax in rl_figure(dynamic).axes]
    assert titles[2:4] == [
        "identical-reward groups (share, rolled out)",
        "identical-reward groups (share, in the update)",
    ]


def test_rl_log_line_carries_the_identical_groups(caplog):
    # issue 24 medium 9: the RL line of LLaMA-Board's output box had no identical-groups value
    import logging

    from llamafactory.train.callbacks import LogCallback

    from llamafactory_agentic.train.log_callback import extend_log_callback

    callback = LogCallback()
    extend_log_callback([callback])
    with caplog.at_level(logging.INFO):
        record = dict(LOG[0], **{"dynamic_sampling/identical_groups_in_update": 0.25})
        callback._log_rl_line(record, 1)
        callback._log_rl_line(LOG[1], 2)  # trained on the same rollout: its values repeated
    rl = [line for line in caplog.messages if "'reward'" in line]
    assert len(rl) == 2, caplog.messages
    assert "'identical_groups': 0.5, 'identical_in_update': 0.25" in rl[0]
    assert "'identical_groups': 0.5" in rl[1] and "'rollout_of_step': 1" in rl[1]


def test_figures():
    figure = rl_figure(LOG)
    assert len(figure.axes) == 9
    assert list(figure.axes[-1].get_lines()[0].get_ydata()) == [0.0, 0.0]  # clip fraction drawn at 0
    assert rl_figure([{"current_steps": 1, "loss": 1.0}]) is None  # an SFT log: no RL panel
    loss = loss_figure(LOG)
    assert list(loss.axes[0].get_lines()[0].get_ydata()) == [0.0, 0.0]


def test_llamaboard_loss_plot_keeps_zero_losses_for_rl_logs():
    from llamafactory_agentic.integration.activation import register

    register()
    import llamafactory.webui.interface  # noqa: F401  (applies the LLaMA-Board patch)
    from llamafactory.extras.ploting import gen_loss_plot as original
    from llamafactory.webui import control

    assert getattr(control.gen_loss_plot, "__agentic_patched__", False)
    assert len(original(LOG).axes[0].get_lines()[0].get_xdata()) == 0  # LLaMA-Board drops the zero losses
    assert list(control.gen_loss_plot(LOG).axes[0].get_lines()[0].get_xdata()) == [1, 2]
    sft = [{"current_steps": 1, "loss": 2.0}, {"current_steps": 2, "loss": 1.5}]
    assert list(control.gen_loss_plot(sft).axes[0].get_lines()[0].get_ydata()) == [2.0, 1.5]  # unchanged for SFT


def test_read_jsonl_skips_a_half_written_line(tmp_path):
    path = tmp_path / "trainer_log.jsonl"
    path.write_text(json.dumps(LOG[0]) + "\n" + '{"current_steps": 2, "lo')
    assert read_jsonl(str(path)) == [LOG[0]]
    assert read_jsonl(str(tmp_path / "missing.jsonl")) == []


def test_progress_line(tmp_path):
    assert progress_line(str(tmp_path)) == ""
    now = time.time()
    status = {"rollout": 3, "phase": "training", "global_step": 4, "round": 2, "active": 8, "new_tokens": 1234,
              "total_tokens": 5678, "started": now - 75, "updated": now - 1, "done": False}  # fmt: skip
    (tmp_path / "rollout_progress.json").write_text(json.dumps(status))
    line = progress_line(str(tmp_path), now=now)
    # issue 24 low: one numbering with the rollout viewer ("step 5 · 2 groups"): the step the rollout feeds
    assert line == (
        "↻ Rollout of step 5 · round 2 · 8 active trajectories · 1,234 new tokens (5,678 in this rollout) · 1m 15s"
    )
    assert "第 2 轮" in progress_line(str(tmp_path), lang="zh", now=now)
    status.update(done=True, phase="validation")
    (tmp_path / "rollout_progress.json").write_text(json.dumps(status))
    assert progress_line(str(tmp_path), now=now) == (
        "Last: Validation rollout after step 4, 2 rounds, 5,678 new tokens in 1m 14s"
    )
    # issue 24 low: a status written before the current run started is a former run's, not shown
    assert progress_line(str(tmp_path), now=now, since=now) == ""
    assert progress_line(str(tmp_path), now=now, since=now - 10) != ""


def test_progress_status_carries_the_global_step(tmp_path):
    from llamafactory_agentic.rollout.progress import ROLLOUT_PROGRESS_NAME, RolloutProgress

    class Engine:
        def reset(self):
            pass

        def release(self):
            pass

    progress = RolloutProgress(Engine(), enabled=True, status_path=str(tmp_path / ROLLOUT_PROGRESS_NAME))
    progress.phase, progress.global_step = "training", 6
    progress.reset()
    progress.release()
    assert json.loads((tmp_path / ROLLOUT_PROGRESS_NAME).read_text())["global_step"] == 6
    assert progress_line(str(tmp_path)).startswith("Last: Rollout of step 7,")


def test_rl_plot_is_a_grid_across_the_page():
    # issue 35: nine RL plots stacked in one 320-px column (4.2 x 13.5 in, one panel a row)
    figure = rl_figure(LOG)
    width, height = figure.get_size_inches()
    assert width >= 12 and height < width, (width, height)
    columns = {round(ax.get_position().x0, 2) for ax in figure.axes}
    rows = {round(ax.get_position().y0, 2) for ax in figure.axes}
    assert len(columns) == 3 and len(rows) == 3, (columns, rows)
    assert all(ax.get_xlabel() == "step" for ax in figure.axes[-3:])
    few = rl_figure([{"current_steps": 1, "reward/accuracy": 0.5, "reward/mean": 0.5}])  # fewer panels than columns
    assert len(few.axes) == len({round(ax.get_position().x0, 2) for ax in few.axes})


def test_rl_plot_and_warnings_placement():
    # the RL plot sits under the row of the progress bar and the loss plot (the tab's width), not inside the loss
    # plot's column; the reward-gaming warnings right under the rollout progress line
    from llamafactory_agentic.integration.activation import register

    register()
    from llamafactory.webui.interface import create_ui

    demo = create_ui()
    blocks = {block.elem_id: block for block in demo.blocks.values() if getattr(block, "elem_id", None)}
    plot, progress, warnings = (blocks[name] for name in ("agentic_rl_plot", "agentic_rollout_progress",
                                                          "agentic_rl_warnings"))  # fmt: skip
    tab = blocks["agentic_panel"].parent
    assert plot.parent is tab and plot.show_label is False
    siblings = warnings.parent.children
    assert siblings.index(warnings) == siblings.index(progress) + 1
