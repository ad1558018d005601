"""Strip what launchers and log collectors put in front of each nccl-tests line.

Kubernetes' ``/var/log/pods`` (CRI) prefix, timestamps, Open MPI's ``[1,0]<stdout>:``, bracketed
tags (``[0]``, ``[host-a]``), ``srun -l``'s ``0:`` and ``host:`` prefixes are removed, up to four
in a row, so the text-table parser sees the line nccl-tests printed.
"""

from __future__ import annotations

import re

__all__ = ["strip_prefixes"]

# Launcher and collector prefixes, tried repeatedly at the start of each line.
_CRI_PREFIX = re.compile(r"^\d{4}-\d{2}-\d{2}T\S+ (?:stdout|stderr) [FP] ")  # /var/log/pods
_TS_PREFIX = re.compile(
    r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?\s+"
)
_OMPI_PREFIX = re.compile(r"^\[\d+,\d+\]<(?:stdout|stderr)>:\s?")
_BRACKET_PREFIX = re.compile(r"^\[[^\]\s]{1,64}\]:?\s?")
_SRUN_PREFIX = re.compile(r"^\s*\d+:\s")
_HOST_PREFIX = re.compile(r"^[A-Za-z0-9][\w.\-]{0,62}:\s")
_PREFIXES = (
    _CRI_PREFIX,
    _TS_PREFIX,
    _OMPI_PREFIX,
    _BRACKET_PREFIX,
    _SRUN_PREFIX,
    _HOST_PREFIX,
)


def strip_prefixes(line: str) -> str:
    """The line without its launcher/collector prefixes (and without surrounding blanks on the
    left); a line that starts with ``#`` once the prefixes are gone is returned as it stands."""
    text = line.rstrip("\r\n")
    for _ in range(4):
        stripped = text.lstrip()
        if not stripped or stripped[0] == "#":
            return stripped
        for pattern in _PREFIXES:
            match = pattern.match(stripped)
            if match:
                prefix = match.group(0).strip()
                rest = stripped[match.end() :]
                if prefix.startswith("[") and prefix in rest:
                    # interleaved writes repeat the tag mid-line: "...  -1[0]    1626.5 ..."
                    rest = rest.replace(prefix, " ")
                text = rest
                break
        else:
            return stripped
    return text.lstrip()
