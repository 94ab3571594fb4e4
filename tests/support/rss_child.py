"""Run one q38 command in this process and report its peak memory as JSON.

Usage: ``python tests/support/rss_child.py REPORT.json q38-args...``. Writes
``{"rc", "seconds", "vm_hwm_kib", "rss_anon_peak_kib", "rss_file_peak_kib", "ru_maxrss_kib"}``:
VmHWM (peak resident set) from /proc/self/status at exit, RssAnon / RssFile peaks sampled every
10 ms by a thread (the kernel keeps no anonymous-memory high-water mark), and getrusage.
"""

from __future__ import annotations

import json
import resource
import sys
import threading
import time


def _status() -> dict[str, int]:
    out = {}
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            key, _, rest = line.partition(":")
            if key in ("VmHWM", "RssAnon", "RssFile"):
                out[key] = int(rest.split()[0])
    return out


def main(argv: list[str]) -> int:
    report, args = argv[0], argv[1:]
    peaks = {"RssAnon": 0, "RssFile": 0}
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            st = _status()
            for key in peaks:
                peaks[key] = max(peaks[key], st.get(key, 0))
            stop.wait(0.01)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    start = time.perf_counter()
    from q38.cli import main as q38_main

    rc = q38_main(args)
    seconds = time.perf_counter() - start
    stop.set()
    thread.join()
    st = _status()
    for key in peaks:
        peaks[key] = max(peaks[key], st.get(key, 0))
    with open(report, "w", encoding="utf-8") as fh:
        json.dump({"rc": rc, "seconds": seconds, "vm_hwm_kib": st["VmHWM"], "rss_anon_peak_kib": peaks["RssAnon"],
                   "rss_file_peak_kib": peaks["RssFile"],
                   "ru_maxrss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}, fh)
    return rc


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
