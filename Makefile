.PHONY: install demo test bench quality style

check_dirs := llamafactory_agentic tests benchmarks evaluation setup.py _llamafactory_agentic_hook.py

install:
	pip install -c constraints.txt -e ".[dev]"

demo:
	llamafactory-agentic demo

test:
	CUDA_VISIBLE_DEVICES= WANDB_DISABLED=true HF_HUB_OFFLINE=1 python -m pytest -q -ra tests/

bench:
	CUDA_VISIBLE_DEVICES= WANDB_DISABLED=true HF_HUB_OFFLINE=1 python -m pytest -q -m benchmark -s tests/ benchmarks/

quality:
	ruff check $(check_dirs)
	ruff format --check $(check_dirs)

style:
	ruff check $(check_dirs) --fix
	ruff format $(check_dirs)
