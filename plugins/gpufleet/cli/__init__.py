"""The ``gpufleet`` command. Each subcommand lives in its own module with a ``register`` function;
``args`` holds the argument types they share (bounded numbers, names), ``fleet_state`` names the
state folder and ledger a command read and opens the ledger with one-line errors.

Exit codes: 0 success, 1 a negative answer (a refused gate, a failed run), 2 bad input or an
error the user must fix (message on stderr, one line).

The CLI layer: may import ``services`` and everything below them, and its own Airflow REST
client (``gpufleet.cli.airflow_api``); never ``gpufleet.airflow`` (the command runs where
Airflow's task runtime is not).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import traceback

from gpufleet.errors import GpufleetError

# subcommand modules, in help order; each has register(subparsers)
_COMMANDS = (
    "sim_cmd",
    "parse_cmd",
    "gate_cmd",
    "trigger_cmd",
    "approve_cmd",
    "status_cmd",
    "node_cmd",
    "catalog_cmd",
    "ledger_cmd",
)


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr (exit 2), like every other error."""

    def error(self, message: str):  # noqa: D102 - argparse's hook
        self.exit(2, f"{self.prog}: {_one_line(message)} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="gpufleet", description="Operate and inspect a gpufleet GPU fleet.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in _COMMANDS:
        try:
            module = importlib.import_module(f"gpufleet.cli.{name}")
        except ModuleNotFoundError as exc:  # a subcommand not built yet
            if exc.name == f"gpufleet.cli.{name}":
                continue
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except GpufleetError as exc:
        print(f"gpufleet: {_one_line(str(exc))}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        print("gpufleet: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a failure outside gpufleet's own error types: still one line
        if os.environ.get("GPUFLEET_DEBUG"):
            traceback.print_exc()
        print(
            f"gpufleet: unexpected {type(exc).__name__}: {_one_line(str(exc))} "
            "(GPUFLEET_DEBUG=1 shows the traceback)",
            file=sys.stderr,
        )
        return 2


def _one_line(text: str, limit: int = 500) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
