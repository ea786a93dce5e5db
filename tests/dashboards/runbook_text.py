"""Parsing helpers for runbooks/*.md shared by the runbook tests (sections, panel refs, code blocks)."""

from __future__ import annotations

import re
from pathlib import Path

SECTIONS = ("What it means", "Panels to open", "Likely causes, in order", "Commands to confirm", "Remediation")
PANEL_REF = re.compile(r"\*\*([^*›]+?) › ([^*]+?)\*\*")


def sections(text: str) -> dict[str, str]:
    parts = re.split(r"^## (.+)$", text, flags=re.M)
    return {parts[i].strip(): parts[i + 1].strip() for i in range(1, len(parts) - 1, 2)}


def code_blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)


def promql_exprs(text: str) -> list[str]:
    """One expression per line; indented lines continue the previous one."""
    out: list[str] = []
    for block in code_blocks(text, "promql"):
        for line in block.splitlines():
            if not line.strip():
                continue
            if line.startswith((" ", "\t")) and out:
                out[-1] += " " + line.strip()
            else:
                out.append(line.strip())
    return out


def sql_queries(text: str) -> list[str]:
    queries = []
    for block in code_blocks(text, "python"):
        queries += [m.group(2) for m in re.finditer(r'rec\.sql\(("""|")(.*?)\1\)', block, flags=re.S)]
    return queries


def runbook_pages(folder: Path) -> dict[str, str]:
    return {p.stem: p.read_text() for p in sorted(folder.glob("*.md")) if p.name != "README.md"}
