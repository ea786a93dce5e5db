"""The GPU weight-sync paths: CUDA IPC handles (trainer and engine on one node) and an NCCL broadcast
(separate nodes), under the same five boundaries as the CPU paths (``trainer_ref.weight_sync``).

Staging (trainer): the dump's tensors (stage order, engine fusions back to back) are copied into
persistent flat ``uint8`` buckets on the trainer's device (``BUCKET_BYTES`` each, a tensor never split),
one device copy; no host round trip.

* ``cuda_ipc``: ``torch.multiprocessing.reductions.reduce_tensor`` of each bucket gives the arguments of
  ``rebuild_cuda_tensor``; they travel as plain values (classes by name, dtype as text, the IPC and
  ref-counter handles as bytes) because ``collective_rpc`` arguments do not carry torch objects, and
  each worker rebuilds the bucket on its own device index (as vLLM 0.32's ``IPCWeightTransferEngine``
  does, ``vllm/distributed/weight_transfer/ipc_engine.py``), then loads views into it.
* ``nccl``: trainer rank 0 and the engine's workers form a process group through vLLM's
  ``StatelessProcessGroup`` + ``PyNcclCommunicator``
  (``vllm.distributed.weight_transfer.nccl_common.stateless_init_process_group``, the helper vLLM
  0.32's ``NCCLWeightTransferEngine`` uses; trainer rank 0, workers from rank 1). The group is made on
  the first sync: the trainer's send runs in a background thread (it blocks in the rendezvous and the
  broadcasts until the workers join), so the orchestrator's call order (``sync_out`` then
  ``update_weights``) is unchanged. Each bucket is one ``broadcast`` from rank 0.

vLLM's own weight-transfer engines (``weight_transfer_config``) load through ``model.load_weights``;
these paths load through ``model_runner.reload_weights`` like the CPU ones, so fingerprints, fused
layout and fault injection are identical on every path. Tested only where CUDA is present
(``tests/trainer_ref/test_gpu_sync.py``, marked ``gpu``).
"""

from __future__ import annotations

import importlib
import threading
import time
from typing import Any

BUCKET_BYTES = 256 << 20


def plan_buckets(entries: list[tuple[str, str, list[int], int]], bucket_bytes: int = BUCKET_BYTES) -> list[dict[str, Any]]:
    """Buckets of ``(name, dtype, shape, nbytes)`` in order: each a list of ``[name, dtype, shape,
    offset, nbytes]`` (the staging handle's entry format) and its size; a tensor is never split (one
    larger than ``bucket_bytes`` gets a bucket of its own); offsets aligned to 256 bytes."""
    out: list[dict[str, Any]] = []
    cur: list[list[Any]] = []
    off = 0
    for name, dtype, shape, nbytes in entries:
        start = -(-off // 256) * 256
        if cur and start + nbytes > bucket_bytes:
            out.append({"entries": cur, "nbytes": off})
            cur, start = [], 0
        cur.append([name, dtype, list(shape), start, int(nbytes)])
        off = start + int(nbytes)
    if cur:
        out.append({"entries": cur, "nbytes": off})
    return out


def bucket_views(bucket: Any, entries: list[list[Any]]) -> dict[str, Any]:
    """Views (no copy) of the tensors in a flat uint8 bucket."""
    import torch

    return {str(n): bucket[int(o):int(o) + int(nb)].view(getattr(torch, d)).view(*s) for n, d, s, o, nb in entries}


# ---- trainer side --------------------------------------------------------------------------------
def stage(trainer: Any, dump: Any, path: str) -> dict[str, Any]:
    """Stage 2 on a GPU: copy the dump into the trainer's device buckets (made once, re-made when the
    layout changes); returns {seconds, buckets}."""
    import torch

    t0 = time.perf_counter()
    entries = [(n, str(t.dtype).replace("torch.", ""), list(t.shape), t.numel() * t.element_size())
               for n, t in dump.state.items()]
    plan = plan_buckets(entries)
    st = getattr(trainer, "_gpu_stage", None)
    if st is None or st["plan"] != plan:
        st = trainer._gpu_stage = {"plan": plan, "buckets": [
            torch.empty(b["nbytes"], dtype=torch.uint8, device=trainer.device) for b in plan]}
    for b, buf in zip(plan, st["buckets"]):
        for name, view in bucket_views(buf, b["entries"]).items():
            view.copy_(dump.state[name], non_blocking=True)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    st["version"] = dump.version
    return {"seconds": time.perf_counter() - t0, "buckets": len(plan)}


def send(trainer: Any, path: str) -> tuple[dict[str, Any], float]:
    """Stage 3a on a GPU: ``cuda_ipc`` -> the buckets' IPC handles; ``nccl`` -> start broadcasting the
    buckets from rank 0 (background thread; joins the group on the first sync). Returns (transport, s)."""
    t0 = time.perf_counter()
    st = trainer._gpu_stage
    plan = st["plan"]
    if path == "cuda_ipc":
        from torch.multiprocessing.reductions import reduce_tensor

        handle = {"buckets": [{"entries": b["entries"], "nbytes": b["nbytes"], "ipc": encode_ipc(reduce_tensor(buf)[1])}
                              for b, buf in zip(plan, st["buckets"])], "version": st["version"]}
        return {"path": path, "handle": handle}, time.perf_counter() - t0
    if path != "nccl":
        raise ValueError(f"not a GPU path: {path!r}")
    group = getattr(trainer, "_nccl", None)
    if group is None:
        group = trainer._nccl = {"address": _node_ip(), "port": _free_port(),
                                 "world_size": 1 + int((getattr(trainer, "_engine_place", {}) or {}).get("workers") or 1),
                                 "comm": None, "ready": threading.Event()}
    th = threading.Thread(target=_broadcast, args=(trainer, group, st["buckets"]), daemon=True, name="rlobs-nccl-send")
    th.start()
    trainer._nccl_thread = th
    handle = {"buckets": [{"entries": b["entries"], "nbytes": b["nbytes"]} for b in plan], "version": st["version"],
              "rendezvous": {k: group[k] for k in ("address", "port", "world_size")}}
    return {"path": path, "handle": handle}, time.perf_counter() - t0


def _broadcast(trainer: Any, group: dict[str, Any], buckets: list[Any]) -> None:
    import torch

    if group["comm"] is None:
        from vllm.distributed.weight_transfer.nccl_common import trainer_init

        group["comm"] = trainer_init({"master_address": group["address"], "master_port": group["port"],
                                      "world_size": group["world_size"]}, rank=0)
    for buf in buckets:
        group["comm"].broadcast(buf, src=0, stream=torch.cuda.current_stream())
    torch.cuda.synchronize()


def receive_handle(transport: dict[str, Any]) -> dict[str, Any]:
    """Stage 3b of ``nccl``: the handle as sent (the bytes move inside the load, in the workers)."""
    return dict(transport["handle"])


# ---- IPC handle encoding -------------------------------------------------------------------------
def _qualname(obj: Any) -> str:
    return f"{obj.__module__}:{obj.__qualname__}"


def _resolve(name: str) -> Any:
    mod, _, qual = name.partition(":")
    out: Any = importlib.import_module(mod)
    for part in qual.split("."):
        out = getattr(out, part)
    return out


def encode_ipc(args: tuple) -> list[Any]:
    """``reduce_tensor``'s rebuild arguments as plain values (classes by name, dtypes as text, sizes as
    lists, handles as bytes): what ``collective_rpc`` can carry."""
    out: list[Any] = []
    for a in args:
        if isinstance(a, type):
            out.append({"cls": _qualname(a)})
        elif type(a).__name__ == "dtype" and str(a).startswith("torch."):
            out.append({"dtype": str(a).replace("torch.", "")})
        elif isinstance(a, tuple):  # torch.Size / stride
            out.append({"tuple": [int(x) for x in a]})
        else:
            out.append(a)
    return out


def decode_ipc(enc: list[Any], device_index: int | None = None) -> tuple:
    """``encode_ipc``'s inverse; ``device_index`` replaces the sender's (argument 6, as vLLM does)."""
    import torch

    out: list[Any] = []
    for a in enc:
        if isinstance(a, dict) and "cls" in a:
            out.append(_resolve(a["cls"]))
        elif isinstance(a, dict) and "dtype" in a:
            out.append(getattr(torch, a["dtype"]))
        elif isinstance(a, dict) and "tuple" in a:
            out.append(tuple(a["tuple"]) if len(out) != 1 else torch.Size(a["tuple"]))
        else:
            out.append(a)
    if device_index is not None and len(out) > 6:
        out[6] = device_index
    return tuple(out)


def open_ipc(handle: dict[str, Any], device_index: int | None = None) -> dict[str, Any]:
    """The engine's side of ``cuda_ipc``: the trainer's buckets rebuilt from their IPC handles on this process's
    device (``device_index``, default the current one), as {trainer-layout name: view into its bucket}."""
    import torch
    from torch.multiprocessing.reductions import rebuild_cuda_tensor

    dev = torch.cuda.current_device() if device_index is None else device_index
    state: dict[str, Any] = {}
    for b in handle["buckets"]:
        state.update(bucket_views(rebuild_cuda_tensor(*decode_ipc(b["ipc"], dev)), b["entries"]))
    return state


def _node_ip() -> str:
    try:
        import ray

        return ray.util.get_node_ip_address()
    except Exception:  # noqa: BLE001 - outside Ray: this host
        return "127.0.0.1"


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


# ---- engine side (vLLM worker extension methods) -------------------------------------------------
class GpuSyncMixin:
    """Worker-extension methods of the GPU paths; mixed into ``trainer_ref.vllm_ext.WeightSyncExtension``."""

    def rlobs_load_ipc(self, handle: dict[str, Any], perturb: dict[str, float] | None = None) -> dict[str, Any]:
        """Rebuild the trainer's buckets from their IPC handles on this worker's device and load views."""
        import torch

        rep = self._rlobs_reload(open_ipc(handle), perturb)  # type: ignore[attr-defined]
        torch.cuda.synchronize()
        return rep  # no seqlock on this path: the trainer's buckets are not rewritten until the next sync

    def rlobs_nccl_receive(self, handle: dict[str, Any], perturb: dict[str, float] | None = None) -> dict[str, Any]:
        """Join the trainer's group on first use, receive each bucket by broadcast from rank 0, load views."""
        import torch

        comm = getattr(self, "_rlobs_nccl", None)
        if comm is None:
            from vllm.distributed.weight_transfer.nccl_common import (
                stateless_init_process_group,
            )

            rz = handle["rendezvous"]
            rank = 1 + int(getattr(self, "rank", 0))
            comm = self._rlobs_nccl = stateless_init_process_group(rz["address"], int(rz["port"]), rank,
                                                                   int(rz["world_size"]), torch.cuda.current_device())
        state: dict[str, Any] = {}
        for b in handle["buckets"]:
            buf = torch.empty(int(b["nbytes"]), dtype=torch.uint8, device="cuda")
            comm.broadcast(buf, src=0, stream=torch.cuda.current_stream())
            state.update(bucket_views(buf, b["entries"]))
        torch.cuda.synchronize()
        return self._rlobs_reload(state, perturb)  # type: ignore[attr-defined]
