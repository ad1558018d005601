"""The real-output corpus of nvidia-smi -q, nvidia-smi / dcgmi nvlink and kernel-log Xid lines.

Each sample is ``tests/data/parsing/health/corpus/<tool>/<name>.txt`` with a sidecar
``<name>.yaml``: ``source`` (the public address it was published at), ``note`` (what
differs from the original), ``parser``, optional ``args`` and ``expect``, the facts it must
yield. Every fact is checked; a sample whose sidecar lacks a source address fails.

``expect`` keys per parser:

- ``nvidia_smi`` (:func:`parse_nvidia_smi_remap_ecc`; ``args.sections``: the ``-d`` names asked,
  default the health check's): ``gpus`` (GPU blocks read), ``remap_pending`` / ``remap_failure``
  (bus ids whose flag is Yes), ``volatile_uncorrectable`` (bus ids with a volatile
  uncorrectable or double-bit count above 0), ``retired_dbe`` (bus ids with pages retired for
  double-bit errors), ``retirement_pending`` (bus ids with a page retirement pending),
  ``missing`` (the ``what`` of every ``not_run``, in any order), ``problems`` (how many, 0 if
  not said).
- ``nvlink`` (:func:`parse_nvlink_errors`) and ``dcgm_nvlink`` (:func:`parse_dcgmi_nvlink`):
  ``gpus`` (GPUs read), ``up_links`` (links whose state is up), ``down_links`` (``"gpu:link"``
  of links whose state is down), ``all_inactive`` (GPU indexes NVML said have every link
  inactive), ``not_run`` (whether anything did not run), ``problems`` (how many), ``switches``
  (NvSwitches read, dcgmi only).
- ``xid`` (:func:`parse_xid_lines`): ``events`` (``[code, bus]`` in the order logged),
  ``gpu_instances`` (``[bus, gpu instance, compute instance]`` of MIG-attributed events),
  ``problems`` (how many), ``init_failures`` (buses the driver could not initialise,
  ``RmInitAdapter failed``). The driver's own "fallen off the bus" message without an Xid line
  is an event of code 79 (``unknown`` bus when the line names none).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet.parsing.health.dcgm_nvlink import parse_dcgmi_nvlink
from gpufleet.parsing.health.nvidia_smi import parse_nvidia_smi_remap_ecc
from gpufleet.parsing.health.nvlink import parse_nvlink_errors
from gpufleet.parsing.health.xid import parse_xid_lines

CORPUS = Path(__file__).resolve().parents[1] / "data" / "parsing" / "health" / "corpus"
TOOLS = ("nvidia_smi", "nvlink", "xid")
SIDECARS = sorted(p for tool in TOOLS for p in (CORPUS / tool).glob("*.yaml"))


def _sample(sidecar: Path) -> tuple[str, dict[str, Any]]:
    meta = yaml.safe_load(sidecar.read_text(encoding="utf-8"))
    (text_file,) = [p for p in sidecar.parent.glob(sidecar.stem + ".*") if p.suffix != ".yaml"]
    return text_file.read_text(encoding="utf-8"), meta


def _smi_facts(text: str, args: dict[str, Any]) -> dict[str, Any]:
    report = parse_nvidia_smi_remap_ecc(text, **{k: tuple(v) for k, v in args.items()})

    def uncorrectable(gpu: Any) -> bool:
        return any(
            (value or 0) > 0
            for key, value in gpu.ecc_volatile.items()
            if "uncorrectable" in key or key.startswith("double_bit")
        )

    return {
        "gpus": len(report.gpus),
        "remap_pending": [g.pci_bus for g in report.gpus if g.remap_pending],
        "remap_failure": [g.pci_bus for g in report.gpus if g.remap_failure],
        "volatile_uncorrectable": [g.pci_bus for g in report.gpus if uncorrectable(g)],
        "retired_dbe": [g.pci_bus for g in report.gpus if (g.retired_pages_dbe or 0) > 0],
        "retirement_pending": [g.pci_bus for g in report.gpus if g.retirement_pending],
        "missing": sorted(n.what for n in report.not_run),
        "problems": len(report.problems),
    }


def _nvlink_facts(report: Any) -> dict[str, Any]:
    links = [(g.index, link) for g in report.gpus for link in g.links]
    return {
        "gpus": len(report.gpus),
        "up_links": sum(1 for _, link in links if link.state == "up"),
        "down_links": [f"{g}:{link.link}" for g, link in links if link.state == "down"],
        "all_inactive": [g.index for g in report.gpus if g.all_inactive],
        "not_run": bool(report.not_run),
        "problems": len(report.problems),
        "switches": len(report.switches),
    }


def _xid_facts(text: str) -> dict[str, Any]:
    log = parse_xid_lines(text)
    return {
        "events": [[e.code, e.pci_bus] for e in log.events],
        "gpu_instances": [
            [e.pci_bus, e.gpu_instance, e.compute_instance]
            for e in log.events
            if e.gpu_instance is not None
        ],
        "problems": len(log.problems),
        "init_failures": [bus for bus, _ in log.init_failures],
    }


def facts(text: str, meta: dict[str, Any]) -> dict[str, Any]:
    parser = meta["parser"]
    if parser == "nvidia_smi":
        return _smi_facts(text, meta.get("args") or {})
    if parser == "nvlink":
        return _nvlink_facts(parse_nvlink_errors(text))
    if parser == "dcgm_nvlink":
        return _nvlink_facts(parse_dcgmi_nvlink(text))
    if parser == "xid":
        return _xid_facts(text)
    raise AssertionError(f"unknown parser {parser!r}")


def test_the_corpus_is_large_enough():
    counts = {tool: len(list((CORPUS / tool).glob("*.yaml"))) for tool in TOOLS}
    assert sum(counts.values()) >= 45, counts
    assert all(n >= 10 for n in counts.values()), counts


@pytest.mark.parametrize("sidecar", SIDECARS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_sample_yields_its_facts(sidecar: Path):
    text, meta = _sample(sidecar)
    assert str(meta.get("source", "")).startswith("https://"), "no source address"
    assert meta.get("expect"), "no facts to check"
    got = facts(text, meta)
    expect = dict(meta["expect"])
    expect.setdefault("problems", 0)
    if "missing" in expect:
        expect["missing"] = sorted(expect["missing"])
    assert {key: got[key] for key in expect} == expect
