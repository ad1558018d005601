"""``gpufleet catalog check [FILES]``: check fleet catalog files, for a platform team's own CI.

Exit 0 when every file is sound; 2 with every problem listed, one line each
(``file: path.in.file: what is wrong``), and a count when there is more than one. Without
FILES it checks the catalog folder (``include/fleet`` or ``GPUFLEET_CATALOG_DIR``). It reads
files only: no cloud, no ledger.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("catalog", help="check fleet catalog files (exit 0 sound, 2 problems)")
    verbs = p.add_subparsers(dest="verb", required=True, metavar="VERB")
    check = verbs.add_parser("check", help="list every problem in catalog files")
    check.add_argument(
        "files",
        nargs="*",
        type=Path,
        help="YAML files or folders (default: the catalog folder)",
    )
    check.set_defaults(func=run_check)


def _expand(paths: list[Path]) -> list[Path]:
    from gpufleet.config.paths import catalog_files

    out: list[Path] = []
    for path in paths:
        out += catalog_files(path) if path.is_dir() else [path]
    return out


def run_check(args) -> int:
    from gpufleet.config.catalog import check_catalog_files
    from gpufleet.config.paths import catalog_files

    files = _expand(args.files) if args.files else catalog_files()
    if not files:
        print("gpufleet: no catalog files to check (*.yaml, *.yml)", file=sys.stderr)
        return 2
    problems = check_catalog_files(files)
    for line in problems:
        print(line, file=sys.stderr)
    if len(problems) > 1:
        print(
            f"gpufleet: {len(problems)} problem(s) in {len(files)} catalog file(s)",
            file=sys.stderr,
        )
    if problems:
        return 2
    print(f"{len(files)} catalog file(s) sound: {', '.join(str(f) for f in files)}")
    return 0
