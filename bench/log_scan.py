"""Benchmark: classify a big NCCL INFO log vs ``grep -c 'Using network'`` on the same file.

Generates (in a temporary directory, deleted afterwards) a realistic NCCL_DEBUG=INFO log of a
64-rank job (8 nodes x 8 GPUs, IB with GPUDirect RDMA): communicator-init bursts from every rank
(bootstrap, NET/IB device lines, ``Using network``, init START/COMPLETE, topology, ring/tree and
``via NET/IB/.../GDRDMA`` channel lines) at job start and then every ~48 MiB (new communicators),
with steady-state INFO noise in between (``NCCL_DEBUG_SUBSYS=COLL`` opCount lines from every
rank, proxy/tuning/registration chatter; four distinct 4 MiB noise blocks, repeated).
``--scenario`` switches what NCCL did (``roce-nogdr``, ``socket``); ``--mix init-heavy`` writes
nothing but communicator inits, the classifier's worst case (every byte is near an init and
about one line in ten needs parsing: expect a ratio far below the target there). Then it
measures, in the same run:

* ``grep -c 'Using network' FILE`` wall time (best of 5, page cache warm);
* ``classify_nccl_log_file`` wall time (best of 5, runs alternating with grep) and peak RSS,
  each in a fresh child process (``VmHWM`` from ``/proc/self/status``; ``getrusage``
  elsewhere), on the full file and on its first quarter to show that memory does not grow with
  the file;

prints a table and the ratio classify_throughput / grep_throughput, and exits 1 when the ratio
is below ``--target`` (default 0.5) or the classifier gives the wrong answer.

    python -m bench.log_scan                 # 1 GiB
    python -m bench.log_scan --size-mib 128  # quick run
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PLUGINS = REPO / "plugins"

NODES = 8
GPUS = 8
RANKS = NODES * GPUS
BUS = ["18000", "2a000", "3a000", "5d000", "9a000", "ab000", "ba000", "db000"]
IB_DEVICES = " ".join(f"[{i}]mlx5_{i}:1/IB" for i in range(8))


def _host(node: int) -> str:
    return f"gpu-node-{node:03d}"


def _prefix(node: int, dev: int, tid_offset: int = 67) -> str:
    pid = 4100 + dev
    return f"{_host(node)}:{pid}:{pid + tid_offset} [{dev}] NCCL INFO "


SCENARIOS = {
    # name: (network, link layer, GDR used, expected answer)
    "ib-gdr": ("IB", "IB", True, {"transport": "ib", "gdrdma": True, "link_layer": "IB"}),
    "roce-nogdr": (
        "IB",
        "RoCE",
        False,
        {"transport": "roce", "gdrdma": False, "link_layer": "RoCE"},
    ),
    "socket": ("Socket", None, False, {"transport": "socket", "gdrdma": False, "link_layer": None}),
}


def init_burst(
    comm: str, nranks_used: int, first: bool, rng: random.Random, scenario: str = "ib-gdr"
) -> list[str]:
    """Every rank's communicator-init lines, interleaved as in a combined stdout."""
    network, link, gdr, _ = SCENARIOS[scenario]
    gdr_tag = "/GDRDMA" if gdr else ""
    devices = IB_DEVICES.replace("/IB", f"/{link}") if link else ""
    per_rank: list[list[str]] = []
    for rank in range(nranks_used):
        node, dev = divmod(rank, GPUS)
        p0 = _prefix(node, dev, 0)
        p = _prefix(node, dev)
        lines: list[str] = []
        if first:
            lines += [
                p0 + "NCCL_SOCKET_IFNAME set by environment to eth0",
                p0 + f"Bootstrap : Using eth0:10.42.{node}.{10 + dev}<0>",
                p0 + "cudaDriverVersion 12040",
            ]
            if rank == 0:
                lines.append(p0 + "NCCL version 2.21.5+cuda12.4")
            lines += [
                p + "NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.",
                p + "NCCL_IB_HCA set by environment to mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,"
                "mlx5_5,mlx5_6,mlx5_7",
            ]
            if devices:
                lines.append(
                    p + f"NET/IB : Using {devices} [RO]; OOB eth0:10.42.{node}.{10 + dev}<0>"
                )
            else:
                lines.append(p + "NET/IB : No device found.")
                lines.append(p + f"NET/Socket : Using [0]eth0:10.42.{node}.{10 + dev}<0>")
        lines += [
            p + "Using non-device net plugin version 0",
            p + f"Using network {network}",
            p + f"ncclCommInitRank comm {comm} rank {rank} nranks {nranks_used} cudaDev {dev} "
            f"nvmlDev {dev} busId {BUS[dev]} commId 0x{rng.getrandbits(64):016x} - Init START",
            p + f"Setting affinity for GPU {dev} to ffffff,ffffffff",
            p + f"NVLS multicast support is available on dev {dev}",
            p
            + f"GPU Direct RDMA {'Enabled' if gdr else 'Disabled'} for GPU {BUS[dev]} / HCA {dev} "
            f"(distance 3 {'<=' if gdr else '>'} {4 if gdr else 2}), read 1 mode Default",
            p + f"comm {comm} rank {rank} nRanks {nranks_used} nNodes {NODES} "
            f"localRanks {GPUS} localRank {dev} MNNVL 0",
            p + f"Trees [0] {(rank + 1) % nranks_used}/-1/-1->{rank}->{(rank - 1) % nranks_used} "
            f"[1] {(rank + 1) % nranks_used}/-1/-1->{rank}->{(rank - 1) % nranks_used}",
            p + "P2P Chunksize set to 524288",
        ]
        for channel in range(16):
            nxt_dev = (dev + 1) % GPUS
            lines.append(
                p + f"Channel {channel:02d}/0 : {rank}[{dev}] -> {node * GPUS + nxt_dev}"
                f"[{nxt_dev}] via P2P/CUMEM/read"
            )
            if dev in (0, GPUS - 1):
                peer = (rank + GPUS) % nranks_used
                lines.append(
                    p + f"Channel {channel:02d}/0 : {rank}[{dev}] -> {peer}[{dev}] [send] "
                    f"via NET/{network}/{dev}{gdr_tag}"
                )
                lines.append(
                    p + f"Channel {channel:02d}/0 : {peer}[{dev}] -> {rank}[{dev}] [receive] "
                    f"via NET/{network}/{dev}{gdr_tag}/Shared"
                )
        lines += [
            p + f"Connected all rings, use ring PXN 0 GDR {int(gdr)}",
            p + "Connected all trees",
            p + "threadThresholds 8/8/64 | 512/8/64 | 512 | 512",
            p + "32 coll channels, 32 collnet channels, 16 nvls channels, 32 p2p channels, "
            "32 p2p channels per peer",
            p + f"ncclCommInitRank comm {comm} rank {rank} nranks {nranks_used} cudaDev {dev} "
            f"nvmlDev {dev} busId {BUS[dev]} commId 0x0 - Init COMPLETE",
            p + f"Init timings - ncclCommInitRank: rank {rank} nranks {nranks_used} total 1.43 "
            "(kernels 0.21, alloc 0.08, bootstrap 0.51, allgathers 0.02, topo 0.27, graphs 0.01, "
            "connections 0.30, rest 0.03)",
        ]
        per_rank.append(lines)
    out: list[str] = []
    longest = max(len(lines) for lines in per_rank)
    for i in range(longest):
        for lines in per_rank:
            if i < len(lines):
                out.append(lines[i])
    return out


def noise_block(rng: random.Random, target_bytes: int) -> str:
    """Steady-state INFO chatter from all ranks (COLL opCount lines and friends)."""
    ops = ["AllReduce", "AllGather", "ReduceScatter", "Broadcast", "Send", "Recv"]
    lines: list[str] = []
    size = 0
    op_count = rng.randrange(1 << 20)
    while size < target_bytes:
        node, dev = rng.randrange(NODES), rng.randrange(GPUS)
        p = _prefix(node, dev)
        kind = rng.random()
        if kind < 0.86:
            op = rng.choice(ops)
            op_count += 1
            count = rng.choice([262144, 1048576, 33554432])
            line = (
                p + f"{op}: opCount {op_count:x} sendbuff 0x7f{rng.getrandbits(36):09x} "
                f"recvbuff 0x7f{rng.getrandbits(36):09x} count {count} "
                f"datatype {rng.choice([7, 9])} op 0 root 0 comm 0x55d1c8a3e2a0 [nranks={RANKS}] "
                f"stream 0x55d1c9f0{rng.randrange(4096):03x}"
            )
        elif kind < 0.92:
            line = (
                p + f"{rng.choice(ops)}: {rng.choice([1048576, 67108864])} Bytes -> Algo 1 "
                f"proto 2 time {rng.uniform(20, 900):.6f}"
            )
        elif kind < 0.96:
            line = p + f"NVLS comm 0x55d1c8a3e2a0 headRank {dev} nHeads 8 buffSize 4194304"
        elif kind < 0.98:
            line = p + f"CC Off, workFifoBytes 1048576 (registered buffer {rng.getrandbits(24)})"
        else:
            line = p + f"Proxy Progress: proxyState {rng.randrange(3)} opCount {op_count:x}"
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines) + "\n"


def generate(
    path: Path,
    size_bytes: int,
    seed: int = 1,
    scenario: str = "ib-gdr",
    burst_every: int = 48 << 20,
) -> dict[str, int]:
    """Write the log; ``burst_every=0`` gives an init-heavy log (no steady-state noise)."""
    rng = random.Random(seed)
    noise = [noise_block(rng, 4 << 20) for _ in range(4)]
    written = 0
    bursts = 0
    anchors = 0
    next_burst = 0
    comm_id = 0x55D1C8A3E2A0
    with open(path, "w", encoding="ascii", buffering=1 << 20) as handle:
        while written < size_bytes:
            if written >= next_burst:
                first = bursts == 0
                comms = 3 if first else 1
                for _ in range(comms):
                    comm_id += 0x1000
                    lines = init_burst(f"0x{comm_id:x}", RANKS, first, rng, scenario)
                    burst = "\n".join(lines) + "\n"
                    handle.write(burst)
                    written += len(burst)
                    anchors += RANKS
                    first = False
                bursts += 1
                next_burst += burst_every
            if burst_every:
                block = noise[rng.randrange(len(noise))]
                handle.write(block)
                written += len(block)
    return {"bytes": written, "bursts": bursts, "anchors": anchors}


def copy_prefix(src: Path, dst: Path, size_bytes: int) -> None:
    with open(src, "rb") as fin, open(dst, "wb") as fout:
        remaining = size_bytes
        while remaining > 0:
            chunk = fin.read(min(8 << 20, remaining))
            if not chunk:
                break
            fout.write(chunk)
            remaining -= len(chunk)
        fout.write(fin.readline())  # finish the last line


CHILD = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[2])
from gpufleet.parsing.nccl_log import classify_nccl_log_file

def peak_kib():
    # VmHWM is this process's own high-water mark; ru_maxrss can carry the parent's peak over
    # fork+exec on Linux, so it is only the fallback.
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

base = peak_kib()
t0 = time.perf_counter()
info = classify_nccl_log_file(sys.argv[1])
wall = time.perf_counter() - t0
peak = peak_kib()
print(json.dumps({"wall": wall, "peak_kib": peak, "base_kib": base,
                  "transport": info.transport, "gdrdma": info.gdrdma, "ranks": info.ranks,
                  "version": info.nccl_version, "link_layer": info.link_layer}))
"""


def run_classify(path: Path) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), str(PLUGINS)],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout)


def run_grep(path: Path) -> tuple[float, int]:
    t0 = time.perf_counter()
    out = subprocess.run(
        ["grep", "-c", "Using network", str(path)], capture_output=True, text=True, check=False
    )
    wall = time.perf_counter() - t0
    return wall, int(out.stdout.strip() or 0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-mib", type=int, default=1024, help="log size (default 1024)")
    parser.add_argument("--target", type=float, default=0.5, help="minimum throughput ratio")
    parser.add_argument("--repeat", type=int, default=5, help="timed runs per tool (best kept)")
    parser.add_argument("--dir", default=None, help="where to put the temporary files")
    parser.add_argument(
        "--scenario",
        choices=sorted(SCENARIOS),
        default="ib-gdr",
        help="what the job's NCCL did (default ib-gdr)",
    )
    parser.add_argument(
        "--mix",
        choices=["steady", "init-heavy"],
        default="steady",
        help="steady: init bursts every 48 MiB in COLL noise (default); "
        "init-heavy: nothing but communicator inits",
    )
    args = parser.parse_args(argv)
    if shutil.which("grep") is None:
        print("grep not found", file=sys.stderr)
        return 2

    tmp = Path(tempfile.mkdtemp(prefix="gpufleet-logscan-", dir=args.dir))
    try:
        big = tmp / "nccl_big.log"
        t0 = time.perf_counter()
        burst_every = 0 if args.mix == "init-heavy" else 48 << 20
        meta = generate(big, args.size_mib << 20, scenario=args.scenario, burst_every=burst_every)
        gen_s = time.perf_counter() - t0
        small = tmp / "nccl_quarter.log"
        copy_prefix(big, small, (args.size_mib << 20) // 4)
        sizes = {"quarter": small.stat().st_size, "full": big.stat().st_size}
        print(
            f"generated {sizes['full'] / 2**20:.0f} MiB in {gen_s:.1f}s: {meta['bursts']} init "
            f"bursts, {meta['anchors']} 'Using network' lines, 64 ranks / 8 nodes, "
            f"scenario {args.scenario}, mix {args.mix}"
        )

        rows = []
        for label, path in (("quarter", small), ("full", big)):
            subprocess.run(["cat", str(path)], stdout=subprocess.DEVNULL, check=True)  # warm
            greps, classes = [], []
            for _ in range(args.repeat):  # alternate, so both see the same machine load
                greps.append(run_grep(path))
                classes.append(run_classify(path))
            grep_wall = min(w for w, _ in greps)
            grep_count = greps[0][1]
            best = min(classes, key=lambda r: r["wall"])
            peak_kib = max(r["peak_kib"] for r in classes)
            base_kib = min(r["base_kib"] for r in classes)
            rows.append(
                (label, path, sizes[label], grep_wall, grep_count, best, peak_kib, base_kib)
            )

        print()
        header = (
            f"{'file':>8} {'size MiB':>9} {'grep -c s':>10} {'grep MB/s':>10} "
            f"{'classify s':>11} {'classify MB/s':>14} {'peak RSS MiB':>13} {'ratio':>6}"
        )
        print(header)
        print("-" * len(header))
        ok = True
        ratio_full = 0.0
        for label, _path, size, grep_wall, _count, best, peak_kib, _base in rows:
            grep_mbs = size / grep_wall / 1e6
            cls_mbs = size / best["wall"] / 1e6
            ratio = cls_mbs / grep_mbs
            if label == "full":
                ratio_full = ratio
            print(
                f"{label:>8} {size / 2**20:9.0f} {grep_wall:10.3f} {grep_mbs:10.0f} "
                f"{best['wall']:11.3f} {cls_mbs:14.0f} {peak_kib / 1024:13.1f} {ratio:6.2f}"
            )
        quarter_rss = rows[0][6] / 1024
        full_rss = rows[1][6] / 1024
        print()
        print(
            f"peak RSS: {quarter_rss:.1f} MiB at {sizes['quarter'] / 2**20:.0f} MiB, "
            f"{full_rss:.1f} MiB at {sizes['full'] / 2**20:.0f} MiB "
            f"(interpreter + module baseline {rows[1][7] / 1024:.1f} MiB)"
        )
        answer = rows[1][5]
        print(
            f"classify answer: transport={answer['transport']} gdrdma={answer['gdrdma']} "
            f"ranks={answer['ranks']} version={answer['version']} link={answer['link_layer']}"
        )
        print(f"grep -c 'Using network' counted {rows[1][4]} lines")
        expected = {**SCENARIOS[args.scenario][3], "ranks": RANKS}
        wrong = {k: answer[k] for k, v in expected.items() if answer[k] != v}
        if wrong:
            print(f"FAIL: wrong answer {wrong}, expected {expected}")
            ok = False
        if full_rss > quarter_rss * 1.25 + 8:
            print("FAIL: peak RSS grows with the file size")
            ok = False
        verdict = "PASS" if ratio_full >= args.target else "FAIL"
        print(
            f"throughput ratio classify/grep = {ratio_full:.2f} (target >= {args.target}): "
            f"{verdict}"
        )
        ok = ok and ratio_full >= args.target
        return 0 if ok else 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
