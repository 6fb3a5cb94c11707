"""Sample app for CPU flame graphs of Python 3.11 (Debian 12), which has no perf support:
py-spy reads the interpreter's frames from the sidecar, merged with the native ones.
run_rounds -> compute_round -> fib_recursive (the hot function). Prints its throughput once a
second as JSON: {"rate": rounds per second, ...}.
"""

import json
import signal
import sys
import time


def fib_recursive(n: int) -> int:
    return n if n < 2 else fib_recursive(n - 1) + fib_recursive(n - 2)


def compute_round(seed: int) -> int:
    return fib_recursive(16) ^ seed


def run_rounds() -> None:
    start, rounds, result = time.monotonic(), 0, 0
    while True:
        result ^= compute_round(rounds)
        rounds += 1
        elapsed = time.monotonic() - start
        if elapsed >= 1.0:
            print(json.dumps({"rate": rounds / elapsed, "result": result,
                              "time": int(time.time() * 1000)}), flush=True)
            start, rounds = time.monotonic(), 0


signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
run_rounds()
