# Copyright 2026 the llamafactory-agentic developers.
#
# Licensed under the Apache License, Version 2.0 (the "License").

"""Benchmark harness for agentic models (placeholder package until its own issue).

The protocol it will implement is docs/algorithms.md §9: sampling at temperature 0.6 / top-p 0.95, the training
observation string, stop strings sent to the engine, the training tool cache shared, pass@1 over R runs and unbiased
pass@k. Until then, evaluate with `llamafactory-cli train` validation (`eval_dataset`, greedy, one trajectory per
prompt, reward and accuracy logged) on the RL formats.
"""
