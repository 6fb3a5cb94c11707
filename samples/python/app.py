"""Sample app for the LTTng technique: Python logging events reach LTTng through the
python3-lttngust agent (importing `lttngust` registers this process with the session daemon
found in /var/run/lttng, which must already be running: the sidecar starts before the app).

Logs one INFO record per tick on logger `sample`, and a WARNING every 50th tick.
TICK_SECONDS is the pause between ticks. WORK_SECONDS of the thread's own CPU time computing in
each tick (default none) give a CPU profile samples however busy the machine is: logging alone
costs a few percent of a core and waits on a slow stdout.
"""

import logging
import os
import signal
import sys
import time

import lttngust  # noqa: F401  (registers the LTTng Python agent on import)

logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(asctime)s %(message)s")
logger = logging.getLogger("sample")
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))

interval = float(os.environ.get("TICK_SECONDS", "0.1"))
work = float(os.environ.get("WORK_SECONDS", "0"))
tick = 0
while True:
    tick += 1
    busy_until = time.thread_time() + work
    while time.thread_time() < busy_until:
        sum(range(1000))
    logger.info("tick %d: %d orders processed", tick, tick * 3)
    if tick % 50 == 0:
        logger.warning("tick %d: queue is getting long", tick)
    time.sleep(interval)
