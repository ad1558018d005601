"""From what a scan found to the answer: which transport NCCL used, with GPUDirect RDMA or not.

Design: docs/design/parsers.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpufleet.errors import ParseError
from gpufleet.parsing.nccl_log.facts import (
    LEGACY_IB,
    LEGACY_NO_VERBS,
    LEGACY_OFI,
    LEGACY_SOCKET,
    LogFacts,
)
from gpufleet.parsing.nccl_log.lines import text
from gpufleet.parsing.nccl_log.transports import classify_network_name, is_ofi, quality

__all__ = ["NcclLogInfo", "decide"]


@dataclass(frozen=True, slots=True)
class NcclLogInfo:
    """The transport NCCL used, and the log lines that say so (``evidence``, deduplicated).

    ``problems``: contradictory init lines, not believed; ``failures``: connections that failed
    on the transport reported (``"ibv_modify_qp failed: Connection timed out: <line>"``)."""

    transport: str
    network_name: str | None
    gdrdma: bool | None
    nccl_version: str | None
    ranks: int | None
    link_layer: str | None
    ofi_provider: str | None
    evidence: tuple[str, ...]
    ranks_seen: int | None = None
    problems: tuple[str, ...] = ()
    failures: tuple[str, ...] = ()


def decide(facts: LogFacts) -> NcclLogInfo:
    """The answer for everything the scan found. Raises :class:`ParseError` without NCCL lines."""
    if not facts.nccl_seen:
        raise ParseError("no NCCL INFO lines found (run with NCCL_DEBUG=INFO to see the transport)")
    evidence: list[str] = []
    link_layer = _link_layer(facts, evidence)
    single_reason = _single_node_reason(facts)
    if single_reason is not None:
        transport, network_name = _single_node(facts, single_reason, evidence)
    else:
        transport, network_name = _worst_network(facts, evidence)
        if transport == "unknown" and facts.verbs_failures:
            transport = _tried_ib(facts, evidence)
    _network_evidence(facts, transport, network_name, link_layer, single_reason, evidence)
    gdrdma = _gdrdma(facts, transport, evidence)
    nccl_version = _nccl_version(facts, evidence)
    ranks, ranks_seen = _ranks(facts)
    if facts.multi_node_line and transport != "none":
        evidence.append(facts.multi_node_line)
    problems = tuple(f"{why}, not believed: {line}" for why, line in facts.refused.items())
    if problems:
        evidence.append(f"{len(problems)} contradictory init line(s) refused (see problems)")
    failures = tuple(f"{why}: {line}" for why, line in facts.verbs_failures.items())
    if failures:
        evidence.append(
            f"connection failure on the {transport} transport: "
            + "; ".join(facts.verbs_failures)
            + " (see failures)"
        )
    providers = list(facts.providers)
    return NcclLogInfo(
        transport=transport,
        network_name=network_name,
        gdrdma=gdrdma,
        nccl_version=nccl_version,
        ranks=ranks,
        link_layer=link_layer,
        ofi_provider=(
            providers[0]
            if len(providers) == 1
            else (", ".join(sorted(providers)) if providers else None)
        ),
        evidence=tuple(dict.fromkeys(e for e in evidence if e)),
        ranks_seen=ranks_seen,
        problems=problems,
        failures=failures,
    )


def _link_layer(facts: LogFacts, evidence: list[str]) -> str | None:
    """``IB``, ``RoCE``, ``mixed`` (ranks differ, named in evidence) or None (not shown)."""
    layers = list(facts.link_layers)
    if len(layers) == 1:
        return layers[0]
    if len(layers) > 1:
        evidence.append("link layers differ between ranks: " + ", ".join(sorted(layers)))
        return "mixed"
    return None


def _single_node_reason(facts: LogFacts) -> str | None:
    """Why the job ran on a single node without using the network; None when it did not."""
    if facts.net_channel is not None or facts.window_net_lines != 0:
        return None
    if facts.max_nodes == 1:
        return facts.single_node_line or "nNodes 1"
    if facts.max_nodes is not None or not facts.init_seen:
        return None
    # no nNodes line (NCCL before 2.20 prints none): every communicator seen must be whole in
    # the log, or one whose other ranks are elsewhere (another pod's log) may span nodes
    partial = [n for n, ranks in facts.ranks_by_size.items() if len(ranks) < n]
    if partial:
        return None
    if len(facts.init_hosts) == 1:
        return (
            f"all {facts.max_nranks} ranks of the largest communicator on host "
            f"{text(next(iter(facts.init_hosts)))}"
        )
    if not facts.init_hosts and facts.intra_node_line is not None:
        # pasted without NCCL's host prefixes: every rank's connections were logged (INIT lines)
        # and none went over the network
        return (
            f"all {facts.max_nranks} ranks seen, connected within the node: {facts.intra_node_line}"
        )
    return None


def _single_node(facts: LogFacts, reason: str, evidence: list[str]) -> tuple[str, str | None]:
    """Transport ``none``; a network initialised anyway is named, as unused."""
    evidence.append("single node, no 'via NET/' channel: only P2P/SHM used (" + reason + ")")
    network_name: str | None = None
    for name in facts.networks:
        evidence.append(f"network initialised but unused: {facts.network_lines[name]}")
        network_name = network_name or name
    return "none", network_name


_LEGACY_NAMES = (
    (LEGACY_OFI, "OFI"),
    (LEGACY_IB, "IB"),
    (LEGACY_SOCKET, "Socket"),
    (LEGACY_NO_VERBS, "Socket"),  # no libibverbs: no IB transport, so sockets
)
_VERSION_NUMBERS = re.compile(r"(\d+)\.(\d+)")


def _legacy_networks(facts: LogFacts, evidence: list[str]) -> dict[str, int]:
    """NCCL < 2.7: per process the network it would have chosen; name -> processes."""
    if not facts.legacy:
        return {}
    versions = [_VERSION_NUMBERS.match(v) for v in facts.versions]
    modern = [m.group(0) for m in versions if m and (int(m.group(1)), int(m.group(2))) >= (2, 7)]
    if modern and facts.info_seen:
        evidence.append(
            f"NCCL {modern[0]} prints a 'Using network' line and this log has none: cut short? "
            "The transport init lines alone do not say which network was used"
        )
        return {}
    if modern:
        evidence.append(
            f"no NCCL INFO line: logged at NCCL_DEBUG=WARN, where NCCL {modern[0]} prints no "
            "'Using network' line"
        )
    chosen: dict[str, int] = {}
    for bits in facts.legacy.values():
        name = next(name for bit, name in _LEGACY_NAMES if bits & bit)
        chosen[name] = chosen.get(name, 0) + 1
    return chosen


def _legacy_line(facts: LogFacts, name: str) -> str:
    """The first line of a process initialising network ``name`` (NCCL < 2.7)."""
    bits = [b for b, n in _LEGACY_NAMES if n == name and b in facts.legacy_lines]
    line = facts.legacy_lines[bits[0]]
    if bits[0] == LEGACY_NO_VERBS:
        line += " (libibverbs could not be loaded, so NCCL's IB transport could not start)"
    return line


def _tried_ib(facts: LogFacts, evidence: list[str]) -> str:
    """No network line, but a verbs call failed: NCCL was connecting over its IB transport."""
    first = next(iter(facts.verbs_failures.values()))
    evidence.append("a verbs call failed, so NCCL was connecting over its IB transport: " + first)
    return classify_network_name("IB", facts.link_layers)


def _worst_network(facts: LogFacts, evidence: list[str]) -> tuple[str, str | None]:
    """The worst network any rank chose (from ``Using network``, else from channel lines, else
    from what each process initialised)."""
    layers = list(facts.link_layers)
    providers = list(facts.providers)
    counts: dict[str, int] = facts.networks
    lines: dict[str, str] = facts.network_lines
    source = None
    if not facts.networks and facts.net_channel_names:
        counts, lines = {}, facts.net_channel_names
        source = "no 'Using network' line; network taken from channel lines: "
    elif not facts.networks:
        counts = _legacy_networks(facts, evidence)
        lines = {name: _legacy_line(facts, name) for name in counts}
        source = "no 'Using network' line (NCCL before 2.7, or at NCCL_DEBUG=WARN, prints none); "
        source += "network taken from what each process initialised: "
    classes = {name: classify_network_name(name, layers, providers) for name in lines}
    if not classes:
        evidence.append("no 'Using network' line and no 'via NET/' channel line")
        return "unknown", None
    worst = min(classes, key=lambda n: (quality(classes[n]), classes[n], n))
    transport = classes[worst]
    if source:
        evidence.append(source + lines[worst])
    else:
        evidence.extend(lines[name] for name in classes)
    if len(set(classes.values())) > 1 or len(classes) > 1:
        parts = ", ".join(
            f"{name} ({classes[name]}, {counts.get(name, 0)} line(s))" for name in sorted(classes)
        )
        evidence.append(f"ranks disagree on the network: {parts}; reporting the worst: {transport}")
    return transport, worst


def _network_evidence(
    facts: LogFacts,
    transport: str,
    network_name: str | None,
    link_layer: str | None,
    single_reason: str | None,
    evidence: list[str],
) -> None:
    """The device, provider and no-device lines behind the transport (or their absence)."""
    if transport in ("ib", "roce") and link_layer is None:
        evidence.append("IB network but no 'NET/IB : Using' device line: link layer unknown")
    elif transport in ("ib", "roce"):
        evidence.extend(facts.link_layers[layer] for layer in sorted(facts.link_layers))
    if network_name and is_ofi(network_name.lower()) and single_reason is None:
        if facts.providers:
            evidence.extend(facts.providers[p] for p in sorted(facts.providers))
        else:
            evidence.append("OFI network but no 'Selected Provider' line: provider unknown")
    if transport == "socket" and facts.ib_no_device:
        evidence.append(facts.ib_no_device)


def _gdrdma(facts: LogFacts, transport: str, evidence: list[str]) -> bool | None:
    """Whether GPUDirect RDMA was used, strongest evidence first (see the module docstring)."""
    if transport == "none":
        return None
    # what the connections did (channel lines, ring summary) outranks per-GPU topology lines
    if facts.gdr_channel or "1" in facts.ring_gdr:
        evidence.append(facts.gdr_channel or facts.ring_gdr["1"])
        if facts.window_gdr_lines and facts.window_net_lines > facts.window_gdr_lines:
            evidence.append(
                f"GDRDMA on {facts.window_gdr_lines} of {facts.window_net_lines} 'via NET/' "
                "channel lines near communicator init: some connections do not use GPUDirect RDMA"
            )
        return True
    if facts.net_channel or "0" in facts.ring_gdr:
        evidence.append(facts.net_channel or facts.ring_gdr["0"])
        if facts.net_channel:
            evidence.append("'via NET/' channel lines without /GDRDMA")
        return False
    if facts.gdr_enabled_gpu:
        evidence.append(facts.gdr_enabled_gpu)
        return True
    if facts.gdr_disabled_gpu:
        evidence.append(facts.gdr_disabled_gpu)
        return False
    if transport in ("socket", "ofi-tcp"):
        evidence.append(f"{transport} transport (TCP): no GPUDirect RDMA")
        return False
    if facts.gdr_enabled_hca:
        evidence.append(facts.gdr_enabled_hca)
        return True
    if facts.gdr_disabled_hca:
        evidence.append(facts.gdr_disabled_hca)
        return False
    return None


def _nccl_version(facts: LogFacts, evidence: list[str]) -> str | None:
    """The first NCCL version seen; several versions in one log are named in evidence."""
    if not facts.versions:
        return None
    version = next(iter(facts.versions))
    evidence.append(facts.versions[version])
    if len(facts.versions) > 1:
        evidence.append("several NCCL versions in one log: " + ", ".join(facts.versions))
    return version


def _ranks(facts: LogFacts) -> tuple[int | None, int | None]:
    """``(ranks, ranks_seen)`` as described in the module docstring."""
    if facts.init_seen:
        ranks_seen = len(facts.comm_ranks)
        return max(facts.max_nranks, ranks_seen), ranks_seen
    if facts.anchor_keys:
        # no init lines: count the (host, pid, device) that logged a network choice
        return None, len(facts.anchor_keys)
    if not facts.networks and any(facts.legacy):
        # NCCL < 2.7: the processes that initialised a network
        return None, sum(1 for key in facts.legacy if key)
    return None, None
