"""What a training launch may carry: its image, command, env and priority class. Pure.

Design: docs/design/workflows.md.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gpufleet.domain.inputs import shown
from gpufleet.domain.names import (
    DNS1123_SUBDOMAIN_BODY,
    ENV_NAME,
    IMAGE_REF,
    IMAGE_REGISTRY,
    MAX_IMAGE_PATH,
    MAX_IMAGE_REF,
    whole,
)

KIB = 1024
MAX_ENV_VALUE = 32 * KIB  # bytes of UTF-8, one value
MAX_ENV_TOTAL = 256 * KIB  # bytes of UTF-8, every name and value together
MAX_ENV_VARS = 256
MAX_COMMAND_ARGS = 64
MAX_COMMAND_ARG = 4 * KIB  # bytes of UTF-8, one argument
MAX_PRIORITY_CLASS = 253  # a PriorityClass name is a DNS-1123 subdomain

# env a training job gets from the JobSet (and so may not set itself)
RENDEZVOUS_ENV = frozenset({"MASTER_ADDR", "MASTER_PORT", "NNODES", "NODE_RANK", "GPUS_PER_NODE"})
# Kubernetes' own priority classes (k8s.io/kubernetes pkg/apis/scheduling: SystemClusterCritical,
# SystemNodeCritical) and the prefix it reserves for them (SystemPriorityClassPrefix)
SYSTEM_PRIORITY_CLASSES = ("system-node-critical", "system-cluster-critical")
SYSTEM_PRIORITY_PREFIX = "system-"
# a PriorityClass name a launch may ask for at all (which ones a namespace may take is the
# catalog's): a DNS-1123 subdomain, never a ``system-`` one
PRIORITY_CLASS = re.compile(whole(f"(?!{SYSTEM_PRIORITY_PREFIX}){DNS1123_SUBDOMAIN_BODY}"))


def _size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def image_problem(image: Any) -> str | None:
    """Why ``image`` is not an OCI image reference, or None."""
    match = IMAGE_REF.fullmatch(image) if isinstance(image, str) else None
    if match:
        # the path after the registry, split as distribution's anchoredNameRegexp does: the
        # first component is the registry when it reads as one and more follow
        first, _, rest = match.group(1).partition("/")
        path = rest if rest and IMAGE_REGISTRY.fullmatch(first) else match.group(1)
        if len(path) <= MAX_IMAGE_PATH:
            return None
        return (
            f"image {shown(image)}: its repository path is {len(path)} characters; at most "
            f"{MAX_IMAGE_PATH}"
        )
    head = image[: MAX_IMAGE_REF + 1] if isinstance(image, str) else ""
    odd = next((c for c in head if not " " < c < "\x7f"), None)
    seen = f" (it holds {_codepoint(odd)})" if odd else ""
    return (
        f"image {shown(image)}{seen} is not an OCI image reference: [registry[:port]/]path[:tag]"
        "[@sha256:<64 hex>], the path in lower-case ASCII letters and digits (joined by '.', "
        f"'_', '__', '-' or '/'), at most {MAX_IMAGE_REF} characters, no spaces or invisible "
        "characters; e.g. nvcr.io/nvidia/pytorch:24.05-py3"
    )


def _codepoint(char: str) -> str:
    """``U+200B ZERO WIDTH SPACE``: a character a reader cannot see or tell apart, named."""
    return f"U+{ord(char):04X} {unicodedata.name(char, 'a control character')}"


def command_problems(command: Any) -> list[str]:
    """Why ``command`` is not a bounded argv, one sentence each; empty when it is."""
    if (
        isinstance(command, str)
        or not isinstance(command, Sequence)
        or not command
        or not all(isinstance(w, str) for w in command)
    ):
        return ["command must be a non-empty list of strings (the container's argv)"]
    problems = []
    if len(command) > MAX_COMMAND_ARGS:
        problems.append(
            f"command has {len(command)} arguments; at most {MAX_COMMAND_ARGS}: put the rest "
            "in a script in the image or a config file on the job's Lustre directory"
        )
    for i, word in enumerate(command):
        if _size(word) > MAX_COMMAND_ARG:
            problems.append(
                f"command[{i}] is {_size(word)} bytes; an argument is at most "
                f"{MAX_COMMAND_ARG} bytes: pass a file instead"
            )
        if "\0" in word:
            problems.append(f"command[{i}] {shown(word)} holds a NUL character (execve cannot)")
    return problems


def env_problems(env: Any, platform_owned: Callable[[str], bool] | None = None) -> list[str]:
    """Why ``env`` cannot be a training job's env, one sentence each; empty when it can.

    Its names, values and size; the rendezvous variables (``RENDEZVOUS_ENV``); and, given
    ``platform_owned`` (whether the platform sets a name on the pool's pods: its RDMA and NCCL
    plumbing), the platform's names (``platform_env_problems``)."""
    if not isinstance(env, Mapping):
        return ["env must be a mapping of names to string values"]
    problems = []
    if len(env) > MAX_ENV_VARS:
        problems.append(f"env has {len(env)} variables; at most {MAX_ENV_VARS}")
    total = 0
    for key, value in env.items():
        if not isinstance(key, str) or not ENV_NAME.fullmatch(key):
            problems.append(
                f"env name {shown(key)} is not an environment variable name (letters, digits, "
                "'_', '-' and '.', not starting with a digit; nothing else, no newline)"
            )
            continue
        if not isinstance(value, str):
            problems.append(f"env {key}: value must be a string (got {type(value).__name__})")
        else:
            total += _size(key) + _size(value)
            if _size(value) > MAX_ENV_VALUE:
                problems.append(
                    f"env {key}: the value is {_size(value)} bytes; at most {MAX_ENV_VALUE}: "
                    "put large settings in a file (the image or the job's Lustre directory) and "
                    "pass its path"
                )
            if "\0" in value:
                problems.append(f"env {key}: the value holds a NUL character (execve cannot)")
        if key in RENDEZVOUS_ENV:
            problems.append(
                f"env {key} is set by the platform from the JobSet (rendezvous: "
                f"{', '.join(sorted(RENDEZVOUS_ENV))}) and cannot be overridden; remove it from env"
            )
    if total > MAX_ENV_TOTAL:
        problems.append(
            f"env is {total} bytes in all; at most {MAX_ENV_TOTAL}: put large settings in a "
            "file and pass its path"
        )
    if platform_owned is not None:
        problems += platform_env_problems(env, platform_owned)
    return problems


def platform_env_problems(
    env: Mapping[Any, Any], platform_owned: Callable[[str], bool]
) -> list[str]:
    """The names of ``env`` the platform sets on the pods (``platform_owned``), each refused with
    what to do; the rendezvous names and names that are no names are ``env_problems``'."""
    return [
        f"env {key} is platform-owned (the pool's RDMA/NCCL plumbing: NCCL_NET, NCCL_DEBUG*, "
        "NCCL_NET_PLUGIN, LD_LIBRARY_PATH, LD_PRELOAD, FI_* and the pool's NCCL tuning) and "
        "cannot be set by a training job; remove it from env (a pool's tuning is the "
        "platform's, for every job on the pool)"
        for key in env
        if isinstance(key, str)
        and ENV_NAME.fullmatch(key)
        and key not in RENDEZVOUS_ENV
        and platform_owned(key)
    ]


def priority_class_problem(
    value: Any, allowed: Sequence[str] | None, cluster: str, namespace: str
) -> str | None:
    """Why ``value`` may not be the job's priority class in ``namespace`` of ``cluster``, whose
    catalog entry allows ``allowed`` there (None: not known, only the name is checked), or None
    (no class asked for is always allowed)."""
    if value is None:
        return None
    if isinstance(value, str) and value.startswith(SYSTEM_PRIORITY_PREFIX):
        return (
            f"priority_class {shown(value)} is the cluster's own, for its system pods (a "
            "training job with it may preempt them)"
            + ("; " + _allowed_words(allowed, cluster, namespace) if allowed is not None else "")
        )
    if (
        not isinstance(value, str)
        or len(value) > MAX_PRIORITY_CLASS
        or not PRIORITY_CLASS.fullmatch(value)
    ):
        return f"priority_class {shown(value)} is not a PriorityClass name (a DNS-1123 subdomain)"
    if allowed is not None and value not in allowed:
        return f"priority_class {value!r} is not allowed; " + _allowed_words(
            allowed, cluster, namespace
        )
    return None


def _allowed_words(allowed: Sequence[str], cluster: str, namespace: str) -> str:
    if allowed:
        return (
            f"namespace {namespace!r} of cluster {cluster!r} allows: {', '.join(allowed)} "
            "(catalog `priority_classes`)"
        )
    return (
        f"namespace {namespace!r} of cluster {cluster!r} allows no priority class (the "
        "catalog's `priority_classes` lists none for it): leave priority_class empty, or ask "
        "the platform team to allow one there"
    )
