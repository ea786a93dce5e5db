"""The staging buffer's write: one copy per run of tensors that lie in memory as they lie in the
buffer, the bytes exact in every case (gaps, strided, bfloat16, other memory at the same shapes)."""

from __future__ import annotations

import numpy as np
import torch

from probes.staging import StagingBuffer, _runs, _source, views


def _flat_state(shapes: dict[str, tuple[tuple[int, ...], torch.dtype]]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Tensors as views of one byte buffer, laid out as the staging buffer lays them out."""
    offs, off = {}, 0
    for k, (shape, dt) in shapes.items():
        item = torch.empty(0, dtype=dt).element_size()
        off = -(-off // item) * item
        offs[k] = off
        off += int(np.prod(shape)) * item
    flat = torch.zeros(off, dtype=torch.uint8)
    g = torch.Generator().manual_seed(0)
    out = {}
    for k, (shape, dt) in shapes.items():
        n = int(np.prod(shape)) * torch.empty(0, dtype=dt).element_size()
        v = flat[offs[k]:offs[k] + n].view(dt).view(shape)
        v.copy_(torch.randn(shape, generator=g).to(dt))
        out[k] = v
    return flat, out


SHAPES = {"a": ((64, 3), torch.float32), "n": ((5,), torch.bfloat16), "b": ((7, 2), torch.float32),
          "c": ((3,), torch.float16), "d": ((9, 4), torch.float32)}


def _staged(buf: StagingBuffer) -> dict[str, np.ndarray]:
    v, _ = views(buf.handle())
    return {k: a.copy() for k, a in v.items()}


def _same_bits(staged: dict[str, np.ndarray], state: dict[str, torch.Tensor]) -> bool:
    def bits(t: torch.Tensor) -> np.ndarray:
        t = t.contiguous()
        return (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy()

    return set(staged) == set(state) and all(np.array_equal(staged[k], bits(t)) for k, t in state.items())


def test_a_flat_state_is_one_copy_and_a_gap_splits_it():
    _flat, state = _flat_state(SHAPES)
    buf = StagingBuffer(prefix="rlobs-test-runs")
    try:
        buf.write(state, 1)
        assert len(_runs({k: _source(v) for k, v in state.items()}, buf.entries)) == 1
        assert _same_bits(_staged(buf), state)
        with torch.no_grad():
            state["d"].add_(1.0)  # the trainer's step, in place
        buf.write(state, 2)
        assert _same_bits(_staged(buf), state) and buf.version == 2
        gap = {k: v for k, v in state.items() if k != "b"}  # a tensor left out: the memory has a hole
        buf.write(gap, 3)
        assert 1 < len(_runs({k: _source(v) for k, v in gap.items()}, buf.entries)) < len(gap)  # split where it must
        assert _same_bits(_staged(buf), gap)
    finally:
        buf.close()


def test_other_memory_with_the_same_shapes_is_copied_from_where_it_is():
    _flat, state = _flat_state(SHAPES)
    buf = StagingBuffer(prefix="rlobs-test-runs")
    try:
        buf.write(state, 1)
        path = buf.path
        other = {k: (v.clone() + 3).to(v.dtype) for k, v in state.items()}  # separate allocations
        buf.write(other, 2)
        assert buf.path == path  # same layout: written in place
        assert len(_runs({k: _source(v) for k, v in other.items()}, buf.entries)) >= 2
        assert _same_bits(_staged(buf), other)
        buf.write(state, 3)  # back to the flat memory: its bytes, not a cached copy of anything else
        assert _same_bits(_staged(buf), state)
        strided = {k: (v.t() if v.dim() == 2 else v) for k, v in state.items()}
        buf.write(strided, 4)  # strided sources are copied contiguous (a new layout: other shapes)
        assert _same_bits(_staged(buf), strided)
    finally:
        buf.close()


def test_numpy_views_of_one_buffer_are_one_run_too():
    base = np.arange(40, dtype=np.float32)
    state = {"x": base[:10].reshape(2, 5), "y": base[10:25], "z": base[25:]}
    buf = StagingBuffer(prefix="rlobs-test-runs")
    try:
        buf.write(state, 1)
        assert len(_runs({k: _source(v) for k, v in state.items()}, buf.entries)) == 1
        v, _ = views(buf.handle())
        assert all(np.array_equal(v[k], a) for k, a in state.items())
    finally:
        buf.close()
