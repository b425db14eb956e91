"""``taketurns view`` on a large run (issue 29): a 500,000-episode run directory must
open in under 2 s and the server must stay under 200 MB.

The run directory is made as ``bench_storage.py`` makes it: a real Kuhn eval of
``--seed-n`` episodes whose lines are repeated with fresh task indices up to
``--size`` (writing 500,000 episodes through the engine takes minutes; reading them
is what is measured). Its ``summary.json`` is the engine's summary of those lines,
with the bootstrap intervals drawn from 50 resamples instead of 2,000 (the viewer
only reads the file; 2,000 resamples of 500,000 tasks take many minutes).

Measured on a fresh ``taketurns view DIR --port 0`` process:

- time to first page: from starting the process to the runs table answered, and to
  the run's page (summary, first 50 transcripts) answered; each page alone;
- an episodes page far into the file (``offset`` near the end), the first time (the
  line index is extended to there: the file is read once, not parsed) and again (the
  index: only the page's own lines are read); a filtered search page (bounded: at
  most 20,000 lines per request);
- the figures page once every line is read, and how long the env's own figures take
  to be drawn after that (the env's report hook reads ``episodes.jsonl`` once more,
  in the background);
- RSS: the server's peak (``VmHWM``) once it has read every line of the run (for
  the figures), drawn the env's figures and served the pages above.

Run: ``python benchmarks/bench_view.py [--size 500000] [--keep DIR]`` (a few minutes).
Results: ``benchmarks/results/view.md``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import httpx2
import orjson

from taketurns._output import summary as summary_module
from taketurns._output.bootstrap import interval
from taketurns._output.summary import Summarizer

RESULTS = Path(__file__).parent / "results" / "view.md"


def grow(seed_dir: Path, out: Path, size: int) -> int:
    """``out`` holding ``size`` episodes (the seed's lines with fresh task indices),
    its config and a summary; returns the bytes of ``episodes.jsonl``."""
    out.mkdir(parents=True, exist_ok=True)
    seed = [orjson.loads(x) for x in (seed_dir / "episodes.jsonl").read_bytes().splitlines()]
    config = (
        (seed_dir / "config.toml")
        .read_text()
        .replace(f"num_tasks = {len(seed)}", f"num_tasks = {size}")
    )
    (out / "config.toml").write_text(config)
    summarizer = Summarizer(rollouts=1)
    with (out / "episodes.jsonl").open("wb") as f:
        for i in range(size):
            e = seed[i % len(seed)]
            e["task"]["idx"] = i
            e["id"] = f"kuhn-poker/{i}/0"
            for t in e["traces"]:
                t["episode"]["task_idx"], t["episode"]["id"] = i, e["id"]
            f.write(orjson.dumps(e) + b"\n")
            summarizer.add(e)
    summary_module.interval = partial(interval, resamples=50)  # type: ignore[attr-defined]
    summary = summarizer.result(wall_s=float(size) / 100)
    summary["interrupted"] = False
    (out / "summary.json").write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2))
    return (out / "episodes.jsonl").stat().st_size


def status(pid: int, field: str) -> float:
    """``/proc/PID/status`` ``field`` (``VmRSS``, ``VmHWM``) in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise KeyError(field)


def timed(http: httpx2.Client, path: str) -> tuple[float, httpx2.Response]:
    began = time.perf_counter()
    response = http.get(path)
    response.raise_for_status()
    return time.perf_counter() - began, response


def measure(folder: Path, run_id: str, size: int) -> list[str]:
    began = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "taketurns", "view", str(folder), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    rows = ["| measure | value |", "|---|---|"]
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        listening = time.perf_counter() - began
        with httpx2.Client(base_url=url, timeout=120) as http:
            runs_s, _ = timed(http, "/")
            to_runs = time.perf_counter() - began
            run_s, page = timed(http, f"/run/{run_id}")
            to_run = time.perf_counter() - began
            assert page.text.count('class="transcript"') == 50, "the first 50 transcripts"
            far = f"/api/runs/{run_id}/episodes?offset={size - 50}&limit=50"
            far_s, got = timed(http, far)  # indexes the file up to there, once
            assert [e["line"] for e in got.json()["episodes"]] == list(range(size - 50, size))
            again_s, _ = timed(http, far)
            search_s, _ = timed(http, f"/run/{run_id}?q=no+such+text")
            scanned = http.get(f"/api/runs/{run_id}/episodes?q=no+such+text").json()["scanned"]
            rss_open = status(proc.pid, "VmRSS")
            reading = time.perf_counter()
            while True:  # the figures: every line read once, in the background
                row = http.get(f"/api/runs/{run_id}").json()
                if row["read"] >= size:
                    break
                time.sleep(1.0)
            read_s = time.perf_counter() - reading
            figures_s, _ = timed(http, f"/run/{run_id}/figures")
            drawing = time.perf_counter()
            while 'data-final="1"' not in http.get(f"/run/{run_id}/figures").text:
                time.sleep(2.0)  # the env's own figures, drawn in the background
            drawn_s = time.perf_counter() - drawing
            peak = status(proc.pid, "VmHWM")
        rows += [
            f"| listening (process start to URL) | {listening:.2f} s |",
            f"| runs table answered, from process start | {to_runs:.2f} s ({runs_s:.3f} s alone) |",
            f"| **run page answered, from process start** | **{to_run:.2f} s** "
            f"({run_s:.3f} s alone) |",
            f"| episodes page at offset {size - 50:,} (API), first: indexes the file to "
            f"there | {far_s:.3f} s |",
            f"| the same page again (from the line index) | {again_s:.3f} s |",
            f"| search page with no match ({scanned:,} lines scanned per request) "
            f"| {search_s:.3f} s |",
            f"| RSS once the run page is open | {rss_open:.0f} MiB |",
            f"| every line read for the figures (background) | {read_s:.0f} s after opening |",
            f"| figures page once read | {figures_s:.3f} s |",
            f"| the env's own figures drawn (its report hook reads the file once more, in "
            f"the background) | {drawn_s:.0f} s later |",
            f"| **peak RSS (VmHWM) over the whole session** | **{peak:.0f} MiB** |",
        ]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=500_000)
    parser.add_argument("--seed-n", type=int, default=200)
    parser.add_argument("--keep", type=Path, help="make (or reuse) the run directory here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        run = folder / f"kuhn-{args.size}"
        if not (run / "summary.json").is_file():
            seed = Path(tmp) / "seed"
            subprocess.run(
                [
                    *(sys.executable, "-m", "taketurns", "eval", "kuhn-poker"),
                    *("-n", str(args.seed_n), "-o", str(seed), "--no-progress"),
                ],
                check=True,
                capture_output=True,
            )
            made = time.perf_counter()
            nbytes = grow(seed, run, args.size)
            print(f"made {run}: {nbytes / 2**20:,.0f} MiB in {time.perf_counter() - made:.0f} s")
        nbytes = (run / "episodes.jsonl").stat().st_size
        rows = measure(folder, run.name, args.size)
    text = "\n".join(
        [
            "# `taketurns view` on a large run (`python benchmarks/bench_view.py`)",
            "",
            f"{args.size:,} Kuhn episodes, episodes.jsonl {nbytes / 2**20:,.0f} MiB; targets: the "
            "run opens in under 2 s, the server stays under 200 MB.",
            "",
            *rows,
            "",
        ]
    )
    print(text)
    RESULTS.write_text(text)


if __name__ == "__main__":
    main()
