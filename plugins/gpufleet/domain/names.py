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
DNS1123_SUBDOMAIN_BODY = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
DNS1123_SUBDOMAIN = re.compile(whole(DNS1123_SUBDOMAIN_BODY))  # <= 253 chars
LABEL_NAME = re.compile(whole(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"))  # <= 63 chars
LABEL_VALUE = re.compile(whole(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?"))  # <= 63 chars
# An environment variable name as Kubernetes validates a container's env (``envVarNameFmt`` in
# k8s.io/apimachinery/pkg/util/validation/validation.go): the whole string, so "NCCL_NET\n"
# is not a name (it would sit in the pod beside the real NCCL_NET).
ENV_NAME = re.compile(whole(r"[-._a-zA-Z][-._a-zA-Z0-9]*"))

# An OCI image reference, ``[registry[:port]/]path[:tag][@digest]``, written from
# distribution/reference's regexp.go (https://github.com/distribution/reference/blob/
# 0965666a6ade2e06035fe352e38344be1e68951a/regexp.go): path components lower-case alphanumerics
# joined by one '.', one or two '_' or any '-'; the registry a host name, IPv4 or [IPv6] with
# an optional port; the tag ``[\w][\w.-]{0,127}`` (Go's ``\w`` is ASCII: spelled out here, as
# Python's is not); the digest narrowed to the one distribution accepts (go-digest's sha256:
# 64 lower-case hex digits; its reference_test.go refuses sha512). ASCII only: NUL, right-to-left
# overrides, zero-width and look-alike characters are not part of any reference. The lookahead
# first bounds the whole string to MAX_IMAGE_REF characters, so the grammar never runs on a
# long hostile value (and the JSON-schema form, which runs every keyword, stays cheap).
MAX_IMAGE_REF = 512
MAX_IMAGE_PATH = 255  # distribution's RepositoryNameTotalLengthMax: the path after the registry
_ALNUM = "[a-z0-9]+"
_PATH_COMPONENT = f"{_ALNUM}(?:(?:[._]|__|[-]+){_ALNUM})*"
_DOMAIN_COMPONENT = "(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[(?:[a-fA-F0-9:]+)\])"
IMAGE_REGISTRY = re.compile(f"{_HOST}(?::[0-9]+)?")  # fullmatch only: a registry host[:port]
_IMAGE_NAME = f"(?:{IMAGE_REGISTRY.pattern}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_TAG = "[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
_DIGEST = "sha256:[a-f0-9]{64}"
IMAGE_REF = re.compile(
    whole(rf"(?=[\s\S]{{1,{MAX_IMAGE_REF}}}(?![\s\S]))({_IMAGE_NAME})(?::{_TAG})?(?:@{_DIGEST})?")
)

# A node pool as people write it: ``<cluster>/<pool>`` (catalog names are DNS-1123 labels).
POOL_KEY = re.compile(whole(f"{DNS1123_LABEL_BODY}/{DNS1123_LABEL_BODY}"))

# A JobSet's pods are named <jobset>-<replicatedJob>-<job index>-<pod index>-<5 random>, and a
# pod name is at most 63 characters: a JobSet name of at most 40 leaves room for the rest.
MAX_JOBSET_NAME = 40
