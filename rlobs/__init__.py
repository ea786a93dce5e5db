"""rlobs: the flight recorder and doctor for RL post-training of language models.

    import rlobs
    rec = rlobs.init("runs/my-run", component="trainer", rank=0)
    rec.emit("train_step", step=1, loss=0.3, grad_norm=1.2)
    rlobs.shutdown()

Importing rlobs never imports torch, ray, vllm or streamlit.
"""

from rlobs.api import get_recorder, init, shutdown
from rlobs.recorder import NoopRecorder, Recorder, SpanHandle
from rlobs.schema import KINDS, SCHEMA_VERSION

__version__ = "0.1.0"


def open_run(path, *, verify=False):  # noqa: ANN001, ANN201 - thin re-export, imported lazily (duckdb)
    """Open a run record for queries: see ``rlobs.store.open_run`` (``verify``: page checksums)."""
    from rlobs.store import open_run as _open_run

    return _open_run(path, verify=verify)


__all__ = ["init", "get_recorder", "shutdown", "open_run", "Recorder", "NoopRecorder", "SpanHandle",
           "KINDS", "SCHEMA_VERSION", "__version__"]
