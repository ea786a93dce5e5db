"""One Ray instance, one tiny model build and one set of actors (vLLM generator, trainer, grader)
shared by every end-to-end test of trainer_ref; all shut down at the end of the session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SMALL = dict(groups_per_step=4, group_size=4, max_tokens=64, eval_prompts=8, progress=False, grader_workers=1)


@pytest.fixture(scope="session")
def tiny_model() -> str:
    from trainer_ref.model_build import build_tiny

    return str(build_tiny())


@pytest.fixture(scope="session")
def session_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("trainer_ref_session")


@pytest.fixture(scope="session")
def stack(tiny_model: str, session_dir: Path):
    """(actors, model_dir, session run dir): real Ray actors around a real vLLM engine."""
    import ray

    from trainer_ref.config import Config
    from trainer_ref.model_build import tokenizer_hash
    from trainer_ref.run import start_actors, start_ray, stop_actors

    cfg = Config(run_dir=str(session_dir / "record"), **SMALL)
    start_ray(cfg)
    actors = start_actors(cfg, tiny_model, {"tokenizer": tokenizer_hash(tiny_model)})
    yield actors, tiny_model, session_dir / "record"
    stop_actors(actors)
    ray.shutdown()


def small_config(run_dir: Path | str, **over) -> "object":
    from trainer_ref.config import Config

    return Config(run_dir=str(run_dir), **{**SMALL, **over})
