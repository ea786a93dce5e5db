"""The weight-sync staging buffer: named arrays in one flat shared-memory buffer behind a seqlock.

Used by ``probes.weight_sync`` (``SyncSession.read_staging``) and by the reference trainer, whose
generator maps the same buffer from another process without a copy (``StagingBuffer.handle``).
"""

from __future__ import annotations

import fcntl
import mmap
import os
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from probes._common import is_tensor


@dataclass(frozen=True, slots=True)
class StagingRead:
    payload: dict[str, Any]
    seq_before: int
    seq_after: int
    torn: bool
    lock_wait_s: float
    lock_hold_s: float


HEADER_BYTES = 64  # int64 seq at 0, int64 version at 8 (-1: none), rest reserved


def _shm_dir() -> str:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()


class StagingBuffer:
    """The weight-sync staging buffer: one flat buffer of named arrays in shared memory, guarded by a
    lock and a sequence number (a seqlock), that other processes on the node map without a copy.

    Layout: a file under ``/dev/shm`` (a tmpfs; the temp dir where there is none): a 64-byte header
    (int64 ``seq``, int64 ``version``), then each array at its offset, in the order of the first
    write, aligned to its item size only, so arrays written one after the other are contiguous (the
    trainer writes q/k/v back to back so the engine's fused ``qkv_proj`` is a view). ``handle()`` is
    plain JSON (path, size, one ``[name, dtype, shape, offset, nbytes]`` per array, seq, version) from
    which a reader in another process maps the buffer (``views``, or ``trainer_ref.weight_sync`` with
    torch) without serialising anything.

    A writer makes ``seq`` odd, copies the arrays in, makes it even again. A read records ``seq``
    before and after; it is *torn* when the two differ or the first is odd (a write overlapped it).
    The lock is a ``threading.Lock`` plus ``fcntl.flock`` on the file (exclusive for writers, shared
    for readers), so it holds across processes too. Correct code writes and reads under the lock
    (``use_lock=True``) and never tears; the flag exists to catch code that bypasses the lock.
    """

    def __init__(self, directory: str | None = None, prefix: str = "rlobs-staging") -> None:
        self.lock = threading.Lock()
        self._dir, self._prefix = directory or _shm_dir(), prefix
        self._gen = 0
        self.path: str | None = None
        self._fd: int | None = None
        self._mm: mmap.mmap | None = None
        self._hdr: np.ndarray = np.zeros(2, dtype=np.int64)  # before the first write: seq 0, no version
        self._hdr[1] = -1
        self.entries: dict[str, tuple[str, tuple[int, ...], int, int]] = {}  # name -> dtype, shape, offset, nbytes
        self.data: dict[str, np.ndarray] = {}  # name -> view into the shared buffer
        self._bytes: np.ndarray = np.zeros(0, dtype=np.uint8)  # the whole mapping, header included
        self._signature: list[tuple[str, str, tuple[int, ...]]] = []  # (name, dtype, shape) per entry
        # the copies of the last write and the source addresses they were made for (the views hold
        # their sources, so the same addresses are the same memory)
        self._plan: tuple[Any, list[tuple[np.ndarray, np.ndarray]]] = (None, [])
        self.size = HEADER_BYTES
        self.last_lock_wait_s = self.last_lock_hold_s = 0.0  # of the last write
        self._finalizer: weakref.finalize | None = None

    # -- shared state
    @property
    def seq(self) -> int:
        return int(self._hdr[0])

    @seq.setter
    def seq(self, value: int) -> None:
        self._hdr[0] = int(value)

    @property
    def version(self) -> int | None:
        v = int(self._hdr[1])
        return None if v < 0 else v

    @property
    def nbytes(self) -> int:
        """Bytes of array data (the header excluded)."""
        return sum(e[3] for e in self.entries.values())

    def _layout(self, arrays: Mapping[str, tuple[np.ndarray, str]]) -> None:
        """(Re)create the shared file for these arrays (a new file: readers re-map by path)."""
        entries, off = {}, HEADER_BYTES
        for name, (a, dname) in arrays.items():
            item = max(int(a.dtype.itemsize), 1)
            off = -(-off // item) * item
            entries[name] = (dname, tuple(int(x) for x in a.shape), off, int(a.nbytes))
            off += int(a.nbytes)
        seq = self.seq
        self.close()
        _sweep(self._dir, self._prefix)
        self._gen += 1
        path = os.path.join(self._dir, f"{self._prefix}-{os.getpid()}-{id(self):x}-{self._gen}")
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        os.ftruncate(fd, max(off, HEADER_BYTES))
        self._mm = mmap.mmap(fd, max(off, HEADER_BYTES))
        self._fd, self.path, self.size, self.entries = fd, path, max(off, HEADER_BYTES), entries
        self._signature = [(n, e[0], e[1]) for n, e in entries.items()]
        self._finalizer = weakref.finalize(self, _unlink, path)
        self._hdr = np.frombuffer(self._mm, dtype=np.int64, count=2)
        self._hdr[0], self._hdr[1] = seq + (seq % 2), -1
        self.data = {n: _view(self._mm, a.dtype, e[1], e[2]) for (n, e), (a, _) in zip(entries.items(), arrays.values())}
        self._bytes = np.frombuffer(self._mm, dtype=np.uint8)

    def _flock(self, exclusive: bool) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)

    def _funlock(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def write(self, state: Mapping[str, Any], version: int | None = None, *, use_lock: bool = True,
              per_tensor: Callable[[str], None] | None = None) -> int:
        """Copy ``state`` (numpy arrays or torch tensors, bfloat16 as its exact bits) into the buffer, in
        its order; returns the new (even) sequence number. A different set of names, shapes or dtypes
        than the last write lays the buffer out anew (a new file)."""
        srcs = {name: _source(t) for name, t in state.items()}
        t_wait = time.perf_counter()
        if use_lock:
            self.lock.acquire()
        try:
            if [(n, m[0], m[1]) for n, m in srcs.items()] != self._signature:
                self._layout({n: (_array(m[5]), m[0]) for n, m in srcs.items()})
            if use_lock:
                self._flock(True)
            self.last_lock_wait_s = time.perf_counter() - t_wait
            t_hold = time.perf_counter()
            try:
                self.seq += 1  # odd: write in progress
                if per_tensor is None:
                    key = (self._gen, tuple(m[4] for m in srcs.values()))  # the same memory as last time?
                    if self._plan[0] != key:
                        self._plan = (key, [(self._bytes[o:o + src.size], src) for o, src in _runs(srcs, self.entries)])
                    for dst, src in self._plan[1]:  # one memcpy per contiguous run
                        np.copyto(dst, src)
                else:  # tensor by tensor, the hook between them (tests interleave a reader there)
                    for name, m in srcs.items():
                        np.copyto(self.data[name], _array(m[5]), casting="no")
                        per_tensor(name)
                self._hdr[1] = -1 if version is None else int(version)
                self.seq += 1  # even: consistent
            finally:
                if use_lock:
                    self._funlock()
            self.last_lock_hold_s = time.perf_counter() - t_hold
            return self.seq
        finally:
            if use_lock:
                self.lock.release()

    def write_raw(self, handle: Mapping[str, Any], data: Any, *, use_lock: bool = True) -> int:
        """Take another buffer's contents as they are: ``handle`` (its ``handle()``) and ``data`` (its
        array bytes, ``flat()``); used when the bytes crossed nodes and land in this node's buffer."""
        entries = {str(e[0]): (str(e[1]), tuple(int(x) for x in e[2]), int(e[3]), int(e[4])) for e in handle["entries"]}
        raw = np.frombuffer(memoryview(data), dtype=np.uint8)
        if use_lock:
            self.lock.acquire()
        try:
            if [(n, e[0], e[1], e[2]) for n, e in entries.items()] != [(n, e[0], e[1], e[2]) for n, e in self.entries.items()]:
                self._layout({n: (np.empty(e[1], dtype=_np_dtype(e[0])), e[0]) for n, e in entries.items()})
            mm = np.frombuffer(self._mm, dtype=np.uint8)
            if raw.size != self.size - HEADER_BYTES:
                raise ValueError(f"staging data is {raw.size} bytes, the layout needs {self.size - HEADER_BYTES}")
            if use_lock:
                self._flock(True)
            try:
                self.seq += 1
                np.copyto(mm[HEADER_BYTES:], raw)
                self._hdr[1] = int(handle.get("version") if handle.get("version") is not None else -1)
                self.seq += 1
            finally:
                if use_lock:
                    self._funlock()
            return self.seq
        finally:
            if use_lock:
                self.lock.release()

    def flat(self) -> np.ndarray:
        """The array bytes (header excluded) as one uint8 view, e.g. to send to another node."""
        if self._mm is None:
            return np.zeros(0, dtype=np.uint8)
        return np.frombuffer(self._mm, dtype=np.uint8)[HEADER_BYTES:]

    def handle(self) -> dict[str, Any]:
        """Plain JSON a reader on this node maps the buffer from (see the class docstring)."""
        return {"path": self.path, "size": self.size, "seq": self.seq, "version": self.version,
                "entries": [[n, e[0], list(e[1]), e[2], e[3]] for n, e in self.entries.items()]}

    def read(self, *, use_lock: bool = True, per_tensor: Callable[[str], None] | None = None,
             copy: bool = True) -> StagingRead:
        """Read the buffer, timing the lock and checking the sequence number. ``copy=False`` returns
        views into the shared buffer (a zero-copy read: valid until the next write)."""
        t0 = time.perf_counter()
        if use_lock:
            self.lock.acquire()
            self._flock(False)
        t1 = time.perf_counter()
        try:
            before = self.seq
            out = {}
            for name in list(self.data):
                out[name] = self.data[name].copy() if copy else self.data[name]
                if per_tensor is not None:
                    per_tensor(name)
            after = self.seq
        finally:
            if use_lock:
                self._funlock()
                self.lock.release()
        t2 = time.perf_counter()
        return StagingRead(out, before, after, before != after or before % 2 == 1, t1 - t0, t2 - t1)

    def close(self) -> None:
        """Unmap and delete the shared file (readers that mapped it keep their mapping)."""
        self.data, self._signature, self._plan = {}, [], (None, [])
        self._bytes = np.zeros(0, dtype=np.uint8)
        self._hdr = np.array([self.seq, -1], dtype=np.int64)
        if self._mm is not None:
            try:
                self._mm.close()
            except BufferError:  # a view still exported: leave the mapping to the garbage collector
                pass
            self._mm = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._finalizer is not None:
            self._finalizer()
            self._finalizer = None


def _sweep(directory: str, prefix: str) -> None:
    """Delete buffers left by processes that died without closing theirs (a killed Ray actor)."""
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        if not name.startswith(prefix + "-"):
            continue
        pid = name[len(prefix) + 1:].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            _unlink(os.path.join(directory, name))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


# (dtype name, shape, item size, nbytes, data address, the C-contiguous host tensor or array)
Source = tuple[str, tuple[int, ...], int, int, int, Any]
_DTYPE_NAMES: dict[Any, str] = {}
_IS_TENSOR: dict[type, bool] = {}


def _source(t: Any) -> Source:
    """What a write needs of one tensor or array, without a copy where it is already a C-contiguous
    host tensor (a device tensor is copied to the host, a strided one made contiguous), and without
    converting it to numpy (a few microseconds a tensor, which counts for small models)."""
    tensor = _IS_TENSOR.get(type(t))
    if tensor is None:
        tensor = _IS_TENSOR[type(t)] = is_tensor(t)
    if tensor:
        x = t
        if not x.is_cpu:
            x = x.detach().cpu()
        if not x.is_contiguous():
            x = x.detach().contiguous()
        name = _DTYPE_NAMES.get(x.dtype)
        if name is None:
            name = _DTYPE_NAMES[x.dtype] = str(x.dtype).replace("torch.", "")
        return name, tuple(x.shape), x.element_size(), x.nbytes, x.data_ptr(), x
    a = np.asarray(t)
    if not a.flags.c_contiguous:
        a = np.ascontiguousarray(a)
    name = _DTYPE_NAMES.get(a.dtype)
    if name is None:
        name = _DTYPE_NAMES[a.dtype] = str(a.dtype)
    return name, tuple(a.shape), a.itemsize, a.nbytes, a.__array_interface__["data"][0], a


def _array(x: Any) -> np.ndarray:
    """A source's host numpy array (no copy); bfloat16 as its int16 bits."""
    if isinstance(x, np.ndarray):
        return x
    import torch

    x = x.detach()
    return (x.view(torch.int16) if x.dtype == torch.bfloat16 else x).numpy()


def _byte_view(x: Any) -> np.ndarray:
    """A source's bytes as a flat uint8 numpy array (no copy)."""
    if isinstance(x, np.ndarray):
        return x.reshape(-1).view(np.uint8)
    import torch

    return x.detach().reshape(-1).view(torch.uint8).numpy()


def _runs(srcs: Mapping[str, Source],
          entries: Mapping[str, tuple[str, tuple[int, ...], int, int]]) -> list[tuple[int, np.ndarray]]:
    """The copies a write makes: (buffer offset, uint8 source) per run of tensors that lie in memory
    exactly as they lie in the buffer (each next one as far after the previous as in the buffer: the
    parameters of a model flattened in stage order, see ``trainer_ref.weight_sync.flatten_parameters``),
    one run per tensor otherwise.

    One large copy instead of hundreds of small ones is what lets a write run at memcpy speed: glibc's
    memcpy streams copies above ``x86_non_temporal_threshold`` (~100 MB here) with non-temporal
    stores, and copies of a few MB (a parameter) at about half that bandwidth. A run's source view
    spans the bytes between its tensors too; those are under one item size (alignment padding), so
    they lie within the pages of their neighbours, and land in the buffer's padding."""
    out: list[tuple[int, np.ndarray]] = []
    start = addr = end_off = -1
    first: Any = None
    for name, m in srcs.items():
        off, nbytes = entries[name][2], entries[name][3]
        if nbytes == 0:
            continue
        p = m[4]
        if first is not None and p - addr == off - start and 0 <= off - end_off < max(m[2], 1):
            end_off = off + nbytes
            continue
        if first is not None:
            out.append((start, _span(first, end_off - start)))
        first, start, addr, end_off = m[5], off, p, off + nbytes
    if first is not None:
        out.append((start, _span(first, end_off - start)))
    return out


def _span(first: Any, nbytes: int) -> np.ndarray:
    """``nbytes`` bytes from ``first``'s start (a view that keeps ``first`` alive; read-only)."""
    flat = _byte_view(first)
    if flat.size == nbytes:
        return flat
    return np.lib.stride_tricks.as_strided(flat, shape=(nbytes,), strides=(1,), writeable=False)


def _np_dtype(name: str) -> Any:
    return np.dtype(np.int16) if name == "bfloat16" else np.dtype(name)


def _view(mm: Any, dtype: Any, shape: tuple[int, ...], offset: int) -> np.ndarray:
    n = int(np.prod(shape, dtype=np.int64)) if shape else 1
    return np.frombuffer(mm, dtype=dtype, count=n, offset=offset).reshape(shape)


def views(handle: Mapping[str, Any]) -> tuple[dict[str, np.ndarray], Callable[[], int]]:
    """Map a buffer from its ``handle()`` in this process (numpy views, no copy); returns the views
    and a function reading the current sequence number."""
    with open(handle["path"], "r+b") as f:
        mm = mmap.mmap(f.fileno(), int(handle["size"]))
    hdr = np.frombuffer(mm, dtype=np.int64, count=2)
    out = {str(n): _view(mm, _np_dtype(d), tuple(s), int(o)) for n, d, s, o, _ in handle["entries"]}
    return out, lambda: int(hdr[0])
