"""Reading PTX text without a GPU or ptxas: each kernel entry and its body."""

from __future__ import annotations

import re

_ENTRY = re.compile(r"\.entry\s+([\w$]+)\s*\(")


def ptx_entries(ptx: str) -> dict[str, str]:
    """Each ``.entry`` kernel's name and its text, up to the next entry (or the end)."""
    marks = list(_ENTRY.finditer(ptx))
    ends = [m.start() for m in marks[1:]] + [len(ptx)]
    return {m.group(1): ptx[m.end() : end] for m, end in zip(marks, ends)}
