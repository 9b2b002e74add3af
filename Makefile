.PHONY: install demo test bench quality style

check_dirs := llamafactory_agentic tests benchmarks setup.py _llamafactory_agentic_hook.py

install:
	pip install -c constraints.txt -e ".[dev]"

demo:
	llamafactory-agentic demo

test:
	CUDA_VISIBLE_DEVICES= WANDB_DISABLED=true HF_HUB_OFFLINE=1 python -m pytest -q -ra tests/

# CPU benchmarks; each prints its ratio against a baseline measured in the same run.
# GPU: python benchmarks/bench_single_gpu.py --out DIR (issue 12: engine, update, loop, memory, TRL), python
# benchmarks/bench_rollout_gpu.py, python benchmarks/bench_arpo_gpu.py and python benchmarks/bench_eval.py --gpu on a
# CUDA machine.
CPU_BENCHMARKS := bench_activation bench_tools_cache bench_tools_python bench_tools_executor bench_entropy_chunked \
	bench_logprobs_fused bench_rollout bench_eval

bench:
	@for b in $(CPU_BENCHMARKS); do echo "=== benchmarks/$$b.py"; \
		CUDA_VISIBLE_DEVICES= HF_HUB_OFFLINE=1 python benchmarks/$$b.py || exit 1; done

quality:
	ruff check $(check_dirs)
	ruff format --check $(check_dirs)

style:
	ruff check $(check_dirs) --fix
	ruff format $(check_dirs)
