# SPDX-License-Identifier: Apache-2.0
"""Helpers shared by the benchmark scripts (bench/loader_vs_device.py,
bench/compare/compare.py, bench/shuffle/sweep.py).

What lives here: where the built tools are, generating a dataset once,
dropping a dataset's cached pages (cold runs), the device limit for an access
pattern, peak RSS of a process tree, machine facts, medians over alternating
rounds, and rewriting one marked section of docs/performance.md.
"""
from __future__ import annotations

import datetime
import json
import os
import pathlib
import platform
import re
import statistics
import subprocess
import sys
import threading
import time
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

ROOT = pathlib.Path(__file__).resolve().parents[1]
BUILD = pathlib.Path(os.environ.get("DLFEED_BUILD_DIR", ROOT / "build"))
DLFEED = BUILD / "tools" / "dlfeed"
RAW = BUILD / "bench" / "raw_read"
PYTHONPATH = f"{ROOT / 'python'}:{BUILD / 'python'}"


def sh(cmd: Sequence, **kw) -> str:
    """Runs `cmd`, returns stdout; raises with stderr on failure."""
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return proc.stdout


def require(*paths: pathlib.Path, targets: str = "dlfeed_cli raw_read") -> None:
    missing = [str(p) for p in paths if not pathlib.Path(p).exists()]
    if missing:
        sys.exit(f"missing {', '.join(missing)}: build first, e.g. BUILD_TARGETS=\"{targets}\" scripts/setup.sh")


def generate(path: pathlib.Path, args: Sequence, dlfeed: pathlib.Path = DLFEED) -> bool:
    """Writes a dataset with `dlfeed generate` unless `path` already holds one. True if written."""
    path = pathlib.Path(path)
    stamp = path / ".generated"
    want = " ".join(map(str, args))
    if stamp.exists() and stamp.read_text() == want:
        return False
    if path.exists():
        subprocess.run(["rm", "-rf", str(path)], check=True)
    sh([dlfeed, "generate", "--dir", path, *args])
    stamp.write_text(want)
    return True


def data_files(path: pathlib.Path) -> List[str]:
    """Every regular file under `path` (or `path` itself), sorted."""
    path = pathlib.Path(path)
    if path.is_file():
        return [str(path)]
    return sorted(str(p) for p in path.rglob("*") if p.is_file() and p.name != ".generated")


def evict(paths: Iterable) -> int:
    """Drops the cached pages of every file under `paths` (fdatasync, then
    posix_fadvise(DONTNEED): no root needed), as `raw_read --mode evict` does.
    Returns the number of files. A VM's host may still cache them."""
    n = 0
    for p in paths:
        for f in data_files(p):
            fd = os.open(f, os.O_RDONLY)
            try:
                os.fdatasync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
            n += 1
    return n


def warm(paths: Iterable) -> None:
    """Reads every file under `paths` once, so a warm run finds them cached."""
    for p in paths:
        for f in data_files(p):
            with open(f, "rb", buffering=0) as fh:
                while fh.readinto(bytearray(1 << 22)):
                    pass


def raw_read(path, mode: str = "io_uring", strategy: str = "global_shuffle", cold: bool = True,
             name: str = "", qd: int = 32, extra: Sequence = ()) -> Dict[str, float]:
    """bench/raw_read over the same extents in the same order: its key=value line as a dict."""
    cmd = [RAW, "--mode", mode, "--qd", qd, "--strategy", strategy, *extra]
    if name:
        cmd += ["--name", name]
    if not cold:
        cmd.append("--no-evict")
    out = sh([*cmd, path])
    kv = dict(p.split("=", 1) for p in out.split())
    return {k: (v if k == "mode" else float(v)) for k, v in kv.items()}


# The one place that says where a device limit comes from. Cold: `dlfeed
# calibrate` for the strategy's order (it drops the pages, reads the same
# sample extents in the same order with io_uring at queue depth 32 and with one
# pread thread, and keeps the faster). Warm: calibrate always drops the pages,
# so bench/raw_read's io_uring reader without eviction (the page cache's limit).
DEVICE_LIMIT_SOURCE = ("cold: `dlfeed calibrate --patterns STRATEGY` (the faster of io_uring QD32 and one pread "
                       "thread over the same extents in the same order, at most {max_seconds:g} s of it); warm: "
                       "bench/raw_read --mode io_uring --qd 32 --no-evict (the same reads from the page cache)")
DEVICE_LABEL = "device limit (calibrate cold, raw_read warm)"


def device_limit(path, strategy: str, cold: bool, name: str = "", params: Optional[Dict[str, int]] = None,
                 epoch: int = 0, max_seconds: float = 5) -> Dict[str, float]:
    """The storage's own limit for reading `path`'s samples in `strategy`'s
    order (seed 42), cold (pages dropped first) or warm:
    {'samples', 'seconds', 'samples_s', 'mib_s', 'reader', 'peak_rss_kib'}.
    `epoch` applies to the warm reader (calibrate reads epoch 0's order)."""
    flags: List = []
    for k, v in (params or {}).items():
        flags += [f"--{k.replace('_', '-')}", v]
    if cold:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            out_json = pathlib.Path(tmp) / "calibration.json"
            cmd: List = [DLFEED, "calibrate", "--patterns", strategy, "--seed", 42, "--qd", 32, "--max-mb", 0,
                         "--max-seconds", max_seconds, "--out", out_json, *flags]
            if name:
                cmd += ["--fields", name]
            _, peak = run_measured([*cmd, path])
            cal = json.loads(out_json.read_text())
        pat = cal["patterns"][strategy]
        best = max(pat["readers"].values(), key=lambda r: r["mib_per_s"])
        return {"samples": best["samples"], "seconds": best["seconds"], "samples_s": best["samples_per_s"],
                "mib_s": best["mib_per_s"], "reader": pat["limit_reader"], "peak_rss_kib": peak}
    cmd = [RAW, "--mode", "io_uring", "--qd", 32, "--strategy", strategy, "--epoch", epoch, "--no-evict", *flags]
    if name:
        cmd += ["--name", name]
    out, peak = run_measured([*cmd, path])
    kv = dict(p.split("=", 1) for p in out.split())
    samples, secs = int(kv["samples"]), float(kv["seconds"])
    return {"samples": samples, "seconds": secs, "samples_s": samples / secs, "mib_s": float(kv["mib_s"]),
            "reader": "io_uring QD32 (page cache)", "peak_rss_kib": peak}


# ---------------------------------------------------------------- memory

def _children_map() -> Dict[int, List[int]]:
    kids: Dict[int, List[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may hold spaces and parentheses.
        ppid = int(stat[stat.rindex(b")") + 2:].split()[1])
        kids.setdefault(ppid, []).append(int(d))
    return kids


def tree_pids(pid: int) -> List[int]:
    """`pid` and all its descendants (scanning /proc)."""
    kids = _children_map()
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def rss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def tree_rss_kib(pid: int) -> int:
    """Sum of VmRSS over `pid` and its descendants (shared pages count once per process)."""
    return sum(rss_kib(p) for p in tree_pids(pid))


class TreeRssSampler:
    """Samples the RSS of a process tree every `interval` seconds; `peak_kib` is the largest sum seen."""

    def __init__(self, pid: int, interval: float = 0.05):
        self.pid, self.interval, self.peak_kib = pid, interval, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.peak_kib = max(self.peak_kib, tree_rss_kib(self.pid))
            self._stop.wait(self.interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def run_measured(cmd: Sequence, env: Optional[Dict[str, str]] = None, timeout: float = 900
                 ) -> Tuple[str, int]:
    """Runs `cmd`; returns (stdout, peak RSS of its process tree in KiB): the
    larger of the sampled tree sum and the child's own ru_maxrss."""
    proc = subprocess.Popen([str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    with TreeRssSampler(proc.pid) as sampler:
        # communicate() reads both pipes; wait4 below reaps with the child's rusage.
        out_chunks: List[str] = []
        err_chunks: List[str] = []
        t_out = threading.Thread(target=lambda: out_chunks.append(proc.stdout.read()))
        t_err = threading.Thread(target=lambda: err_chunks.append(proc.stderr.read()))
        t_out.start()
        t_err.start()
        deadline = time.monotonic() + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.02)
        proc.returncode = os.waitstatus_to_exitcode(status)
        t_out.join()
        t_err.join()
    out, err = "".join(out_chunks), "".join(err_chunks)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed ({proc.returncode}): {err[-3000:]}")
    return out, max(sampler.peak_kib, usage.ru_maxrss)


def peak_rss_kib(cmd: Sequence) -> int:
    """Peak RSS of a command's process tree (KiB); its output is discarded."""
    return run_measured(cmd)[1]


# ---------------------------------------------------------------- results

def median(xs: Sequence[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def rotated(items: Sequence, round_no: int) -> List:
    """The round's running order: rotated by the round number, so no system
    always runs first (after the eviction, or after a given neighbour)."""
    items = list(items)
    if not items:
        return items
    k = round_no % len(items)
    return items[k:] + items[:k]


def machine() -> Dict[str, str]:
    cpu = ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    load = os.getloadavg()[0]
    return {"node": platform.node(), "cores": str(os.cpu_count()), "cpu": cpu, "mem": f"{mem_gib:.0f} GiB",
            "kernel": platform.release(), "date": datetime.date.today().isoformat(),
            "load": f"{load:.1f}"}


def machine_line(m: Dict[str, str]) -> str:
    load = f"1-minute load {m['load']} at the start" + (f", {m['load_end']} at the end" if m.get("load_end") else "")
    return (f"Measured {m['date']} on {m['node']} ({m['cores']} cores{', ' + m['cpu'] if m['cpu'] else ''}, "
            f"{m['mem']}, Linux {m['kernel']}; {load})")


def git_commit() -> str:
    """The checkout's commit, marked when tracked files other than docs/ (which
    the scripts themselves rewrite) differ from it."""
    try:
        head = sh(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"]).strip()
        dirty = sh(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no", "--", ".",
                    ":(exclude)docs"]).strip()
        return head + (" plus uncommitted changes" if dirty else "")
    except Exception:  # noqa: BLE001 - outside a checkout
        return "unknown"


def undated(text: str) -> str:
    """`text` without the run's date and commit (machine_line's "Measured
    DATE on", git_commit's ", commit HASH[ plus uncommitted changes]")."""
    text = re.sub(r"Measured \d{4}-\d{2}-\d{2} on", "Measured on", text)
    return re.sub(r",? commit (?:[0-9a-f]{7,40}|unknown)(?: plus uncommitted changes)?", "", text)


def replace_section(doc: pathlib.Path, key: str, body: str, legacy_heading: Optional[str] = None) -> None:
    """Rewrites the text between `<!-- KEY:begin -->` and `<!-- KEY:end -->`
    in `doc` (appending the markers at the end the first time); the rest of
    the file is left as it is. `legacy_heading`: a section written before the
    markers existed, from that heading to the next `## `, is replaced."""
    doc = pathlib.Path(doc)
    if doc.resolve().parent == (pathlib.Path(ROOT) / "docs").resolve():
        # docs/ is a reference, not a log: the dated, per-commit record of the
        # run goes to bench/results/latest/, the page keeps the numbers, the
        # machine and the command (tests/python/test_docs_paths.py checks).
        latest = pathlib.Path(ROOT) / "bench" / "results" / "latest"
        latest.mkdir(parents=True, exist_ok=True)
        (latest / (re.sub(r"[^A-Za-z0-9_.-]+", "_", key) + ".md")).write_text(body.strip() + "\n")
        body = undated(body)
    begin, end = f"<!-- {key}:begin -->", f"<!-- {key}:end -->"
    block = f"{begin}\n{body.strip()}\n{end}"
    text = doc.read_text() if doc.exists() else "# Performance\n"
    if begin in text and end in text:
        i, j = text.index(begin), text.index(end) + len(end)
        text = text[:i] + block + text[j:]
    elif legacy_heading and legacy_heading in text:
        i = text.index(legacy_heading)
        nxt = text.find("\n## ", i + 1)
        text = text[:i] + block + "\n" + (text[nxt + 1:] if nxt >= 0 else "")
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    doc.write_text(text)


def fmt_num(x: float) -> str:
    """3 significant digits, thousands separated: 1,234 / 12.3 / 0.123."""
    if x != x:  # nan
        return "–"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.2f}"


def dump_json(path: pathlib.Path, obj) -> None:
    pathlib.Path(path).write_text(json.dumps(obj, indent=1, sort_keys=True) + "\n")


def parse_kv_line(text: str, prefix: str) -> Dict[str, str]:
    m = re.search(rf"^{re.escape(prefix)}(.*)$", text, re.M)
    if not m:
        raise RuntimeError(f"no '{prefix}' line in: {text[-2000:]}")
    return dict(p.split("=", 1) for p in m.group(1).split())
