#!/usr/bin/env python3
"""Debugging aid: a transparent stdio proxy that logs every line each way.

    DROID_SERVER_CMD="python3 tests/interop/wiretap.py /work/main/target/debug/droid serve" tests/interop/run.sh

Each spawned server process gets its own log file in $WIRETAP_DIR (default /tmp/droid-wiretap),
named <timestamp>-<pid>.log, with lines prefixed `>` (client to server) and `<` (server to client).
Signals are forwarded to the child; exits with the child's status. Standard library only.
"""

import os
import signal
import subprocess
import sys
import threading
import time

log_dir = os.environ.get("WIRETAP_DIR", "/tmp/droid-wiretap")
os.makedirs(log_dir, exist_ok=True)
log = open(os.path.join(log_dir, f"{time.strftime('%H%M%S')}-{os.getpid()}.log"), "a", buffering=1)
lock = threading.Lock()
child = subprocess.Popen(sys.argv[1:], stdin=subprocess.PIPE, stdout=subprocess.PIPE)


def record(prefix: str, line: bytes) -> None:
    with lock:
        log.write(f"{time.monotonic():.3f} {prefix} {line.decode('utf-8', 'replace').rstrip()}\n")


def pump_in() -> None:
    for line in sys.stdin.buffer:
        record(">", line)
        try:
            child.stdin.write(line)
            child.stdin.flush()
        except BrokenPipeError:
            break
    record("#", b"client closed stdin")
    try:
        child.stdin.close()
    except BrokenPipeError:
        pass


def forward(signum, _frame) -> None:
    record("#", f"signal {signum}".encode())
    child.send_signal(signum)


for s in (signal.SIGTERM, signal.SIGINT):
    signal.signal(s, forward)
threading.Thread(target=pump_in, daemon=True).start()
for line in child.stdout:
    record("<", line)
    sys.stdout.buffer.write(line)
    sys.stdout.buffer.flush()
code = child.wait()
record("#", f"server exited {code}".encode())
sys.exit(code)
