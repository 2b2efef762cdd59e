"""A tshark capture that the tests start before their traffic (shared by tests/live and
tests/package)."""

import subprocess
import threading


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
