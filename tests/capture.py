"""Waiting for what the tests start before their traffic (shared by tests/live and
tests/package): a tshark capture, a test-bed UDP receiver."""

import os
import select
import subprocess
import threading
import time


def start_capture(netns, iface, path, seconds, bpf=None):
    """tshark writing `iface` in `netns` to `path` for `seconds`, returned once it captures.

    tshark's start-up (loading its dissectors, then starting dumpcap) takes from well under a
    second to several on a loaded machine; a fixed sleep before the traffic lost the first
    packets now and then. Its "Capturing on ..." line comes before dumpcap runs, so it proves
    nothing; "Capture started." comes once dumpcap has opened the interface and the file."""
    args = ["ip", "netns", "exec", netns, "tshark", "-q", "-i", iface, "-a", f"duration:{seconds}",
            "-w", str(path)] + (["-f", bpf] if bpf else [])
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    started = threading.Event()
    said = []

    def drain():  # reads stderr to the end so that tshark never blocks on a full pipe
        for line in p.stderr:
            said.append(line)
            if "Capture started" in line:
                started.set()

    threading.Thread(target=drain, daemon=True).start()
    if not started.wait(timeout=30):
        p.kill()
        raise RuntimeError(f"tshark did not start capturing on {netns}/{iface}: {''.join(said)}")
    return p


def listening(p, timeout=30):
    """Returns `p`, an `espgw-lab testbed udp-recv`, once it has bound its socket: it says
    "udp-recv: listening on ..." on stderr (a fixed sleep was a guess, and datagrams sent
    before the bind are lost). The line is read byte by byte from the descriptor, so that
    nothing written after it is taken from a later `communicate()`."""
    fd, line, end = p.stderr.fileno(), b"", time.monotonic() + timeout
    while not line.endswith(b"\n"):
        left = end - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            p.kill()
            raise RuntimeError(f"udp-recv did not start listening: {line!r}")
        byte = os.read(fd, 1)
        if not byte:
            raise RuntimeError(f"udp-recv ended before listening: {line!r} {p.communicate()}")
        line += byte
    if b"udp-recv: listening on" not in line:
        raise RuntimeError(f"udp-recv said something else first: {line!r}")
    return p
