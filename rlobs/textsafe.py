"""Text that came from a run record (or any input) made safe for where it is shown.

A record is input: a run id, a process name, a grader kind or a file name can hold Rich markup
(``[link=...]``, ``[/]``), terminal escape sequences (``\\x1b[2J``), Markdown (``![x](http://...)`` makes a
browser fetch) or HTML. Everything shown to a person passes through one of these:

* :func:`plain` — control characters (C0, C1, DEL) and bidirectional overrides removed, newlines and
  tabs turned into spaces, length capped;
* :func:`rich` — :func:`plain`, then Rich markup escaped (for strings Rich parses as markup);
* :func:`md` — :func:`plain`, then every character that Markdown or Streamlit gives a meaning
  backslash-escaped (the result is literal text: no links, images, emphasis, tables, HTML, LaTeX or icons);
* :func:`md_code` — :func:`plain` inside a code span (backticks replaced, so it cannot close early).
"""

from __future__ import annotations

import re
from typing import Any

_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_SPACE = re.compile("[\t\n]")
# what makes Markdown (CommonMark + GFM) or Streamlit's extensions do something: emphasis, code, links and
# images, HTML, headings, tables, strikethrough, LaTeX ($), shortcodes and colour directives (:name:, :red[..]),
# and the ':' of a bare URL (GFM autolinks)
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]<>#|!~$:])")
MAX_CHARS = 2000


def plain(value: Any, limit: int = MAX_CHARS) -> str:
    s = _CONTROL.sub("", _SPACE.sub(" ", str(value)))
    return s if len(s) <= limit else s[: limit - 1] + "…"


def rich(value: Any, limit: int = MAX_CHARS) -> str:
    from rich.markup import escape

    return escape(plain(value, limit))


def md(value: Any, limit: int = MAX_CHARS) -> str:
    return _MD_SPECIAL.sub(r"\\\1", plain(value, limit))


def md_code(value: Any, limit: int = MAX_CHARS) -> str:
    return "`" + plain(value, limit).replace("`", "'") + "`"


__all__ = ["md", "md_code", "plain", "rich"]
