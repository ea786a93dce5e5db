"""One Ray instance, one tiny model build and one set of actors (vLLM generator, trainer, grader)
shared by every end-to-end test of trainer_ref; all shut down at the end of the session (under pytest-xdist, at
the end of their group: ``_Stack``)."""

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


class _Stack:
    """The shared stack, started by the first test that asks for it. Serially it lives to the end of the session;
    under pytest-xdist its files are one group (tests/conftest.py), run back to back on one worker, and it stops at
    the group's last test, so the worker's heavy slot is free for the next heavy group."""

    def __init__(self) -> None:
        self.value: tuple | None = None

    def get(self, tiny_model: str, session_dir: Path) -> tuple:
        if self.value is None:
            from trainer_ref.config import Config
            from trainer_ref.model_build import tokenizer_hash
            from trainer_ref.run import start_actors, start_ray

            cfg = Config(run_dir=str(session_dir / "record"), **SMALL)
            start_ray(cfg)
            actors = start_actors(cfg, tiny_model, {"tokenizer": tokenizer_hash(tiny_model)})
            self.value = (actors, tiny_model, session_dir / "record")
        return self.value

    def stop(self) -> None:
        if self.value is None:
            return
        import ray

        from trainer_ref.run import stop_actors

        actors, self.value = self.value[0], None
        stop_actors(actors)
        ray.shutdown()


_STACK = _Stack()


@pytest.fixture(scope="session")
def _stack_owner():
    yield _STACK
    _STACK.stop()


@pytest.fixture
def stack(_stack_owner: _Stack, tiny_model: str, session_dir: Path, request: pytest.FixtureRequest):
    """(actors, model_dir, session run dir): real Ray actors around a real vLLM engine."""
    value = _stack_owner.get(tiny_model, session_dir)
    if hasattr(request.config, "workerinput"):
        from ..conftest import HEAVY, STACK_GROUP

        stops = HEAVY.at_group_end.setdefault(STACK_GROUP, [])
        if _stack_owner.stop not in stops:
            stops.append(_stack_owner.stop)
    return value


def small_config(run_dir: Path | str, **over) -> "object":
    from trainer_ref.config import Config

    return Config(run_dir=str(run_dir), **{**SMALL, **over})
