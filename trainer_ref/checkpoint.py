"""Checkpoints without pickle: model and optimiser tensors in safetensors, everything else JSON.

Layout: ``RUN/checkpoints/step_000042/{model.safetensors, optim.safetensors, optim.json, state.json}``
and ``RUN/checkpoints/latest`` (written last, atomically) naming the complete one.
``state.json`` holds the policy version, step, data cursor, the rollout buffer (graded groups not
yet consumed) and the sample ledger, so a resumed run neither skips nor repeats samples.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def ckpt_root(run_dir: str | os.PathLike[str]) -> Path:
    return Path(run_dir) / "checkpoints"


def save_optimizer(opt: Any, directory: Path) -> None:
    from safetensors.torch import save_file

    sd = opt.state_dict()
    tensors, scalars = {}, {}
    for pid, st in sd["state"].items():
        for k, v in st.items():
            if hasattr(v, "shape"):
                tensors[f"{pid}.{k}"] = v.detach().cpu().contiguous()
            else:
                scalars[f"{pid}.{k}"] = v
    save_file(tensors, str(directory / "optim.safetensors"))
    (directory / "optim.json").write_text(json.dumps({"param_groups": sd["param_groups"], "scalars": scalars}))


def load_optimizer(opt: Any, directory: Path) -> None:
    from safetensors.torch import load_file

    tensors = load_file(str(directory / "optim.safetensors"))
    meta = json.loads((directory / "optim.json").read_text())
    state: dict[int, dict[str, Any]] = {}
    for key, v in tensors.items():
        pid, k = key.split(".", 1)
        state.setdefault(int(pid), {})[k] = v
    for key, v in meta["scalars"].items():
        pid, k = key.split(".", 1)
        state.setdefault(int(pid), {})[k] = v
    opt.load_state_dict({"state": state, "param_groups": meta["param_groups"]})


def save_trainer(model: Any, opt: Any, directory: Path) -> None:
    """Model tensors (tied aliases such as ``lm_head.weight`` under ``tie_word_embeddings`` stored
    once, as their canonical tensor: safetensors refuses shared storage) and the optimiser."""
    from safetensors.torch import save_file

    from trainer_ref.weight_sync import tied_aliases

    aliases = tied_aliases(model)
    directory.mkdir(parents=True, exist_ok=True)
    save_file({k: v.detach().cpu().contiguous() for k, v in model.state_dict().items() if k not in aliases},
              str(directory / "model.safetensors"))
    save_optimizer(opt, directory)


def load_trainer(model: Any, opt: Any, directory: Path) -> None:
    """Inverse of ``save_trainer``: every tensor but the tied aliases must be in the checkpoint."""
    from safetensors.torch import load_file

    from trainer_ref.weight_sync import tied_aliases

    missing, unexpected = model.load_state_dict(load_file(str(directory / "model.safetensors")), strict=False)
    bad = [k for k in missing if k not in tied_aliases(model)] + list(unexpected)
    if bad:
        raise RuntimeError(f"checkpoint {directory} does not fit the model: {bad[:5]}")
    load_optimizer(opt, directory)


def step_dir(run_dir: str | os.PathLike[str], step: int) -> Path:
    return ckpt_root(run_dir) / f"step_{step:06d}"


def write_state(run_dir: str | os.PathLike[str], step: int, state: dict[str, Any]) -> Path:
    """Write state.json, then point ``latest`` at the checkpoint (atomic rename)."""
    d = step_dir(run_dir, step)
    d.mkdir(parents=True, exist_ok=True)
    (d / "state.json").write_text(json.dumps(state))
    tmp = ckpt_root(run_dir) / "latest.tmp"
    tmp.write_text(d.name)
    os.replace(tmp, ckpt_root(run_dir) / "latest")
    return d


def latest(run_dir: str | os.PathLike[str]) -> Path | None:
    p = ckpt_root(run_dir) / "latest"
    if not p.exists():
        return None
    d = ckpt_root(run_dir) / p.read_text().strip()
    return d if (d / "state.json").exists() else None


def read_state(directory: Path) -> dict[str, Any]:
    return json.loads((directory / "state.json").read_text())
