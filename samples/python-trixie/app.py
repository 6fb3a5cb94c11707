"""Sample app for CPU flame graphs of Python >= 3.12 (Debian 13's 3.13) through its perf
trampoline: with PYTHONPERFSUPPORT=1 (the injection's `python` hint) each Python function
runs through a small trampoline named `py::NAME:FILE` in /tmp/perf-PID.map, so perf names it.
main_loop -> step -> fib_recursive (the hot function). Prints its throughput once a second as
JSON: {"rate": rounds per second, ...}.
"""

import json
import signal
import sys
import time


def fib_recursive(n: int) -> int:
    return n if n < 2 else fib_recursive(n - 1) + fib_recursive(n - 2)


def step(seed: int) -> int:
    return fib_recursive(16) ^ seed


def main_loop() -> None:
    began, count, acc = time.monotonic(), 0, 0
    while True:
        acc ^= step(count)
        count += 1
        if (elapsed := time.monotonic() - began) >= 1.0:
            print(json.dumps({"rate": count / elapsed, "result": acc,
                              "time": int(time.time() * 1000)}), flush=True)
            began, count = time.monotonic(), 0


signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
main_loop()
