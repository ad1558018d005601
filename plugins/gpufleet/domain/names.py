"""Kubernetes name and label syntax, one definition for the catalog, manifests, schemas and the
DAG Params (whose JSON schemas use these patterns' ``.pattern`` strings). Pure."""

from __future__ import annotations

import re

# unanchored, to compose: a DNS-1123 label (lowercase letters, digits, '-', alphanumeric ends)
DNS1123_LABEL_BODY = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"


def whole(body: str) -> str:
    """A pattern matching the whole string, the same in Python and ECMA-262 (the UI form):
    Python's ``$`` also matches before a final newline (``re.search(r"^a$", "a\\n")``), so the
    end is pinned by ``(?![\\s\\S])``, nothing at all after it. Use ``.fullmatch`` in code."""
    return rf"^(?:{body})$(?![\s\S])"


DNS1123_LABEL = re.compile(whole(DNS1123_LABEL_BODY))  # <= 63 chars
DNS1035_LABEL = re.compile(whole(r"[a-z]([-a-z0-9]*[a-z0-9])?"))  # <= 63 chars
DNS1123_SUBDOMAIN = re.compile(
    whole(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
)
LABEL_NAME = re.compile(whole(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"))  # <= 63 chars
LABEL_VALUE = re.compile(whole(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?"))  # <= 63 chars
# an image reference as the launch form takes it: one word, no whitespace
IMAGE_REF = re.compile(whole(r"\S+"))

# A node pool as people write it: ``<cluster>/<pool>`` (catalog names are DNS-1123 labels).
POOL_KEY = re.compile(whole(f"{DNS1123_LABEL_BODY}/{DNS1123_LABEL_BODY}"))

# A JobSet's pods are named <jobset>-<replicatedJob>-<job index>-<pod index>-<5 random>, and a
# pod name is at most 63 characters: a JobSet name of at most 40 leaves room for the rest.
MAX_JOBSET_NAME = 40
