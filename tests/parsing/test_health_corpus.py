"""The GPU-health corpus as a whole (issue 31): at least 80 real outputs from public sources,
each beside a sidecar naming where it was published, the parser that reads it and the facts it
must yield. The facts themselves are checked per tool by ``test_health_corpus_dcgm.py`` and
``test_health_corpus_smi_nvlink_xid.py``; this module checks that the corpus is what it claims:
large enough, every sample sourced, every sidecar complete, no sample without a sidecar."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

CORPUS = Path(__file__).resolve().parents[1] / "data" / "parsing" / "health" / "corpus"
TOOLS = ("dcgm", "nvidia_smi", "nvlink", "xid")
MINIMUM = 80


def _samples() -> list[Path]:
    return sorted(
        p for tool in TOOLS for p in (CORPUS / tool).glob("*") if p.suffix in (".txt", ".json")
    )


def _sidecar(sample: Path) -> Path:
    return sample.with_suffix(".yaml")


def test_the_corpus_holds_at_least_80_real_outputs():
    assert len(_samples()) >= MINIMUM, f"{len(_samples())} samples under {CORPUS}"


def test_only_the_known_tools_have_folders():
    folders = {p.name for p in CORPUS.iterdir() if p.is_dir()}
    assert folders <= set(TOOLS), folders - set(TOOLS)


@pytest.mark.parametrize("sample", _samples(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_sample_names_its_source_parser_and_facts(sample: Path):
    sidecar = _sidecar(sample)
    assert sidecar.is_file(), f"{sample.name} has no sidecar {sidecar.name}"
    meta = yaml.safe_load(sidecar.read_text(encoding="utf-8"))
    assert isinstance(meta, dict), sidecar
    source = meta.get("source")
    assert isinstance(source, str) and source.startswith("https://"), (sidecar, source)
    assert isinstance(meta.get("parser"), str) and meta["parser"], sidecar
    assert isinstance(meta.get("expect"), dict) and meta["expect"], sidecar
    assert sample.read_bytes().strip(), f"{sample.name} is empty"


def test_no_sidecar_without_its_sample():
    for tool in TOOLS:
        for sidecar in (CORPUS / tool).glob("*.yaml"):
            twins = [sidecar.with_suffix(s) for s in (".txt", ".json")]
            assert any(t.is_file() for t in twins), f"{sidecar} describes no sample"
