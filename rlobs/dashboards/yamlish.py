"""A tiny, deterministic YAML writer for the generated Prometheus and Grafana files.

Only what those files need: mappings (insertion order kept), sequences, strings, numbers, booleans.
Every string is written double-quoted with JSON escapes, which YAML reads verbatim, so templates
like ``{{ $labels.run }}`` and PromQL braces need no special casing. No PyYAML dependency.
"""

from __future__ import annotations

import json
import re
from typing import Any

_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")


def _scalar(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if v is None:
        return "null"
    raise TypeError(f"cannot write {type(v).__name__} as YAML")


def _key(k: str) -> str:
    return k if _PLAIN_KEY.fullmatch(k) and k not in ("true", "false", "null", "yes", "no") else json.dumps(k)


def _lines(v: Any, indent: int) -> list[str]:
    pad = " " * indent
    out: list[str] = []
    if isinstance(v, dict):
        for k, item in v.items():
            if isinstance(item, (dict, list)) and item:
                out.append(f"{pad}{_key(k)}:")
                out.extend(_lines(item, indent + 2))
            else:
                out.append(f"{pad}{_key(k)}: {_flow(item)}")
    elif isinstance(v, list):
        for item in v:
            if isinstance(item, (dict, list)) and item:
                sub = _lines(item, indent + 2)
                out.append(f"{pad}- {sub[0].lstrip()}")
                out.extend(sub[1:])
            else:
                out.append(f"{pad}- {_flow(item)}")
    else:
        out.append(pad + _scalar(v))
    return out


def _flow(v: Any) -> str:
    if isinstance(v, dict):
        return "{}"
    if isinstance(v, list):
        return "[]"
    return _scalar(v)


def dump(doc: Any) -> str:
    """YAML text of ``doc`` (ends with a newline)."""
    return "\n".join(_lines(doc, 0)) + "\n"
