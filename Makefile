.PHONY: install demo system-deps test test-fast test-learning bench quality style

check_dirs := llamafactory_agentic tests benchmarks examples setup.py _llamafactory_agentic_hook.py

# `make demo` and `make test` set up the project's virtual environment (.venv, or VENV=...) when it is missing or
# older than setup.py / constraints.txt, installing with the pinned constraints; an activated venv is not needed.
VENV ?= .venv
PYTHON := $(VENV)/bin/python
INSTALLED := $(VENV)/.installed

$(INSTALLED): setup.py constraints.txt requirements.txt
	@test -x $(PYTHON) || python3 -m venv $(VENV) || { echo "python3 -m venv failed: install python3-venv (Debian) or set VENV to an existing virtual environment"; exit 1; }
	$(PYTHON) -m pip install -q --upgrade pip
	$(PYTHON) -m pip install -q -c constraints.txt -e ".[dev]"
	@touch $(INSTALLED)

install: $(INSTALLED)

demo: $(INSTALLED)
	$(VENV)/bin/llamafactory-agentic demo

# The Redis cache tests start their own loopback redis-server (or use $$REDIS_URL); the 25 slowest tests are listed.
# `make test` runs every test on TEST_WORKERS processes (pytest-xdist; default: two per core; slow tests first and
# `--dist worksteal`, so an idle worker takes queued tests from a busy one instead of leaving them in one queue);
# `make test-fast` only the unit tiers (not `slow`, not `browser`), the inner loop while changing code; `make test` leaves
# out the `learning` runs, which `make test-learning` runs.
# Two processes per core: many tests wait (tool deadlines, servers, subprocess start-up), so twice the cores keeps both
# busy (`make test-fast` on 2 cores: 152 s with 2 workers, 122 s with 4, same run of the suite).
TEST_WORKERS ?= $(shell echo $$(( $$(nproc) * 2 )))
TEST_ENV := CUDA_VISIBLE_DEVICES= WANDB_DISABLED=true HF_HUB_OFFLINE=1

# Debian's redis-server, bubblewrap and chromium, which the tests use for real: checked first; as root with apt-get the
# missing ones are installed, otherwise make stops at once with the one command to run (scripts/ensure_system_deps.sh).
system-deps:
	@bash scripts/ensure_system_deps.sh

test: system-deps $(INSTALLED)
	$(TEST_ENV) $(PYTHON) -m pytest -q -ra --durations=25 -n $(TEST_WORKERS) --dist worksteal -m "not benchmark and not learning" tests/

# The minutes-long learning runs (tests/tasks/test_learning.py: the held-out reward rises over a cold start and 10 ARPO
# steps; tests/tasks/test_compare_smoke.py: the comparison script end to end), one process each; CI runs them after
# `make test`. Side by side on 2 cores they took 524 s and 336 s (9 min); inside `make test` the first set its length.
test-learning: system-deps $(INSTALLED)
	$(TEST_ENV) $(PYTHON) -m pytest -q -ra --durations=5 -n 2 -m learning tests/

test-fast: system-deps $(INSTALLED)
	$(TEST_ENV) $(PYTHON) -m pytest -q -ra --durations=10 -n $(TEST_WORKERS) --dist worksteal -m "not slow and not browser and not benchmark" tests/

# CPU benchmarks; each prints its ratio against a baseline measured in the same run.
# GPU: python benchmarks/bench_single_gpu.py --out DIR (issue 12: engine, update, loop, memory, TRL), python
# benchmarks/bench_rollout_gpu.py, python benchmarks/bench_arpo_gpu.py and python benchmarks/bench_eval.py --gpu on a
# CUDA machine.
CPU_BENCHMARKS := bench_activation bench_tools_cache bench_tools_python bench_tools_executor bench_entropy_chunked \
	bench_logprobs_fused bench_rollout bench_eval

bench: $(INSTALLED)
	@for b in $(CPU_BENCHMARKS); do echo "=== benchmarks/$$b.py"; \
		CUDA_VISIBLE_DEVICES= HF_HUB_OFFLINE=1 $(PYTHON) benchmarks/$$b.py || exit 1; done

quality: $(INSTALLED)
	$(VENV)/bin/ruff check $(check_dirs)
	$(VENV)/bin/ruff format --check $(check_dirs)

style: $(INSTALLED)
	$(VENV)/bin/ruff check $(check_dirs) --fix
	$(VENV)/bin/ruff format $(check_dirs)
