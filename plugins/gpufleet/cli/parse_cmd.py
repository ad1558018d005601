"""``gpufleet parse``: read benchmark output and NCCL logs, print what they say as JSON.

Design: docs/design/parsers.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from gpufleet.errors import ParseError


def register(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "parse",
        help="parse nccl-tests / NCCL log / fio / IOR / dcgmi diag / Xid output and print JSON",
    )
    kinds = parser.add_subparsers(dest="parse_kind", required=True, metavar="KIND")
    for name, func, help_text in (
        ("nccl-tests", run_nccl_tests, "nccl-tests output (text table or -J JSON)"),
        ("nccl-log", run_nccl_log, "NCCL_DEBUG=INFO log: which transport NCCL used"),
        (
            "nccl-init",
            run_nccl_init,
            "NCCL_DEBUG=INFO log: communicator init timings per phase, and their alarms",
        ),
        ("fio", run_fio, "fio JSON output (--output-format=json)"),
        ("ior", run_ior, "IOR text output"),
        ("dcgm", run_dcgm, "dcgmi diag output (-j JSON of DCGM 3.x/4.x, or the text table)"),
        ("xid", run_xid, "kernel log (dmesg, journalctl -k): NVRM Xid events"),
        ("nvidia-smi", run_nvidia_smi, "nvidia-smi -q -d ROW_REMAPPER,ECC: remapped rows, ECC"),
        ("nvlink", run_nvlink, "nvidia-smi nvlink -e: NVLink error counters per GPU and link"),
    ):
        p = kinds.add_parser(name, help=help_text, description=help_text)
        p.add_argument("file", metavar="FILE", help="input file, or - for stdin")
        p.set_defaults(func=func)


_SNIFF = 8192
_TEXT_WORDS = (
    "nThread",
    "busbw",
    "NCCL",
    '"jobs"',
    "Max Write",
    "Max Read",
    "IOR",
    "NVRM",
    "DCGM",
    "NVSMI",
)


def _read_text(name: str) -> str:
    """The input as text; a missing, unreadable, empty or binary input is a :class:`ParseError`
    (text with a stray NUL byte but a benchmark's words is still read)."""
    if name == "-":
        data = sys.stdin.buffer.read()
    else:
        path = Path(name)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise ParseError("no such file") from None
        except IsADirectoryError:
            raise ParseError("is a directory, not a file") from None
        except OSError as exc:
            raise ParseError(f"cannot read ({exc.strerror or exc})") from None
    if not data.strip():
        raise ParseError("is empty")
    text = data.decode("utf-8", errors="replace")
    if "\x00" in text[:_SNIFF] and not any(word in text[:_SNIFF] for word in _TEXT_WORDS):
        raise ParseError("is binary, not benchmark output")
    return text


def _emit(payload: dict[str, Any]) -> int:
    json.dump(payload, sys.stdout, indent=2, sort_keys=False)
    sys.stdout.write("\n")
    return 0


def _with_name(name: str, exc: ParseError) -> ParseError:
    where = "stdin" if name == "-" else name
    message = str(exc).splitlines()[0] if str(exc) else "unrecognised input"
    return ParseError(f"{where}: {message}")


def _parsed(args: argparse.Namespace, parse: Callable[[str], Any]) -> Any:
    """``parse`` of the input named on the command line; a refusal names the input."""
    try:
        return parse(_read_text(args.file))
    except ParseError as exc:
        raise _with_name(args.file, exc) from None


def run_nccl_tests(args: argparse.Namespace) -> int:
    from gpufleet.parsing.nccl_tests import parse_nccl_tests_any

    result = _parsed(args, parse_nccl_tests_any)
    runs = [
        {
            "collective": run.collective,
            "ranks": run.ranks,
            "gpu_model": run.gpu_model,
            "largest_size_bytes": run.largest_size_bytes,
            "busbw_at_largest_gbps": run.busbw_at_largest_gbps,
            "max_busbw_gbps": run.max_busbw_gbps,
            "avg_busbw_gbps": run.avg_busbw_gbps,
            "wrong": run.wrong,
            "out_of_bounds": run.out_of_bounds,
            "truncated": run.truncated,
            "invalid_rows": [
                {"size_bytes": bad.size_bytes, "reasons": list(bad.reasons), "line": bad.text}
                for bad in run.invalid_rows
            ],
            "problems": list(run.problems),
        }
        for run in result.runs
    ]
    return _emit({"runs": runs})


def run_nccl_log(args: argparse.Namespace) -> int:
    from gpufleet.parsing.nccl_log import classify_nccl_log, classify_nccl_log_file

    try:
        if args.file == "-":
            info = classify_nccl_log(sys.stdin.buffer)
        else:
            path = Path(args.file)
            if not path.exists():
                raise ParseError("no such file")
            if path.is_dir():
                raise ParseError("is a directory, not a file")
            if path.is_file() and path.stat().st_size == 0:  # a pipe's size says nothing
                raise ParseError("is empty")
            info = classify_nccl_log_file(path)
    except ParseError as exc:
        raise _with_name(args.file, exc) from None
    except OSError as exc:
        raise _with_name(args.file, ParseError(f"cannot read ({exc.strerror or exc})")) from None
    return _emit(
        {
            "transport": info.transport,
            "network_name": info.network_name,
            "gdrdma": info.gdrdma,
            "nccl_version": info.nccl_version,
            "ranks": info.ranks,
            "link_layer": info.link_layer,
            "ofi_provider": info.ofi_provider,
            "evidence": list(info.evidence),
            "problems": list(info.problems),
            "failures": list(info.failures),
        }
    )


def _init_timings(text: str) -> Any:
    from gpufleet.parsing.nccl_log.init_timings import read_init_timings

    init = read_init_timings(text.splitlines())
    if not (init.timings or init.completes or init.problems):
        raise ParseError("no NCCL 'Init timings' or 'Init COMPLETE' line (NCCL_DEBUG=INFO)")
    return init


def run_nccl_init(args: argparse.Namespace) -> int:
    from gpufleet.domain.nccl_init import init_alarms

    init = _parsed(args, _init_timings)
    payload = init.as_dict()
    summary = init.summary()
    alarms = init_alarms(
        {p: (f.max, f.where) for p, f in summary.items()},
        {p: f.median for p, f in summary.items()},
    )
    payload["alarms"] = [
        {
            "name": a.name,
            "phase": a.phase,
            "seconds": a.seconds,
            "limit_s": a.limit_s,
            "where": a.where,
            "note": a.note,
        }
        for a in alarms
    ]
    return _emit(payload)


def _storage(args: argparse.Namespace, parse: Callable[[str], Any]) -> int:
    result = _parsed(args, parse)
    return _emit(
        {
            "read_mib_s": result.read_mib_s,
            "write_mib_s": result.write_mib_s,
            "read_iops": result.read_iops,
            "write_iops": result.write_iops,
            "problems": list(result.problems),
        }
    )


def run_fio(args: argparse.Namespace) -> int:
    from gpufleet.parsing.storage import parse_fio_json

    return _storage(args, parse_fio_json)


def run_ior(args: argparse.Namespace) -> int:
    from gpufleet.parsing.storage import parse_ior

    return _storage(args, parse_ior)


def run_dcgm(args: argparse.Namespace) -> int:
    from gpufleet.parsing.health import parse_dcgm_diag

    result = _parsed(args, parse_dcgm_diag)
    return _emit(
        {
            "source": result.source,
            "dcgm_version": result.dcgm_version,
            "driver_version": result.driver_version,
            "tests": [
                {
                    "name": test.name,
                    "category": test.category,
                    "status": test.status,
                    "gpus": [
                        {
                            "gpu": gpu.gpu,
                            "status": gpu.status,
                            "messages": list(gpu.messages),
                            "error_codes": list(gpu.error_codes),
                        }
                        for gpu in test.gpus
                    ],
                }
                for test in result.tests
            ],
            "failing_gpus": list(result.failing_gpus),
            "problems": list(result.problems),
        }
    )


def run_xid(args: argparse.Namespace) -> int:
    from gpufleet.parsing.health import parse_xid_lines

    log = _parsed(args, parse_xid_lines)
    events = [
        {
            "pci_bus": event.pci_bus,
            "xid": event.code,
            "pid": event.pid,
            "process": event.process,
            "message": event.message,
            "logged_at": event.logged_at,
        }
        for event in log.events
    ]
    return _emit({"events": events, "problems": list(log.problems)})


def run_nvidia_smi(args: argparse.Namespace) -> int:
    from gpufleet.parsing.health import parse_nvidia_smi_remap_ecc

    report = _parsed(args, parse_nvidia_smi_remap_ecc)
    return _emit(asdict(report))  # the report is the output: per GPU, and problems


def run_nvlink(args: argparse.Namespace) -> int:
    from gpufleet.parsing.health import parse_nvlink_errors

    report = _parsed(args, parse_nvlink_errors)
    return _emit(asdict(report))  # the report is the output: per GPU, and problems
