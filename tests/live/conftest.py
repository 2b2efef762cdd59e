"""Fixtures for the live tests: the test bed of `espgw-lab testbed` in network namespaces
(as root), built per module and always torn down."""
import atexit
import json
import os
import pathlib
import pwd
import select
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from capture import listening, start_capture  # noqa: E402,F401  (re-exported to the live tests)
STATE = pathlib.Path("/run/espgw-testbed")

# The built-in default configurations' keys (public demonstration keys).
GW1_TO_GW2 = dict(spi=0x1001, key=bytes(range(16)) + bytes.fromhex("cafe0001"))
GW2_TO_GW1 = dict(spi=0x2001, key=bytes(range(16, 32)) + bytes.fromhex("cafe0002"))


def espgw_bin():
    path = os.environ.get("ESPGW_BIN")
    if path:
        return str(pathlib.Path(path).resolve())
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "espgw", "-p", "espgw-lab"], cwd=ROOT,
                   check=True)
    return str(ROOT / "target" / "release" / "espgw")


def lab_bin(gateway):
    """The lab binary (test bed, tester, UDP tools): ESPGW_LAB, else beside the gateway."""
    path = os.environ.get("ESPGW_LAB")
    return str(pathlib.Path(path).resolve()) if path else str(pathlib.Path(gateway).with_name("espgw-lab"))


ESPGW = espgw_bin()
LAB = lab_bin(ESPGW)

# Configurations hold keys: the gateway refuses one that group or others may read, so the
# files these tests write are private to their owner (root), as an operator's must be.
os.umask(0o077)

# Gateways that a test starts itself (not through the test bed, which gives each its own)
# keep their sequence state in a scratch directory, not in /var/lib/espgw; removed when the
# test run ends (38 of them had piled up in /tmp before).
if "ESPGW_STATE_DIR" not in os.environ:
    os.environ["ESPGW_STATE_DIR"] = tempfile.mkdtemp(prefix="espgw-live-state-")
    atexit.register(shutil.rmtree, os.environ["ESPGW_STATE_DIR"], ignore_errors=True)


# The test bed's gateways switch to this user once their ports are open (the test bed's
# default); a configuration they reload must be readable by it, as an operator's must be
# readable by the service's user.
GATEWAY_USER = "nobody"
CAP_IPC_LOCK = 14


def gateway_file(name, text):
    """Writes a configuration the running test-bed gateways can read: in the test bed's
    directory, private to the gateways' user."""
    path = STATE / name
    path.write_text(text)
    os.chmod(path, 0o600)
    pw = pwd.getpwnam(GATEWAY_USER)
    os.chown(path, pw.pw_uid, pw.pw_gid)
    return path


def proc_status(pid):
    out = {}
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        k, _, v = line.partition(":")
        out[k] = v.strip()
    return out


def assert_confined(pid, user=GATEWAY_USER):
    """The running gateway as issue 17 asks: an unprivileged user, CAP_IPC_LOCK alone (for
    mlockall), no way back (no_new_privs), a seccomp filter, memory locked, not dumpable.
    Every thread is checked: capabilities and filters are per thread."""
    pw = pwd.getpwnam(user)
    tasks = list(pathlib.Path(f"/proc/{pid}/task").iterdir())
    assert len(tasks) >= 4, tasks  # main, housekeeping, a worker, control, signals
    for task in tasks:
        st = proc_status(f"{pid}/task/{task.name}")
        assert st["Uid"].split() == [str(pw.pw_uid)] * 4, (task, st["Uid"])
        assert st["Gid"].split() == [str(pw.pw_gid)] * 4, (task, st["Gid"])
        assert st["Groups"].split() == [str(pw.pw_gid)], (task, st["Groups"])
        assert int(st["CapEff"], 16) == 1 << CAP_IPC_LOCK, (task, st["CapEff"])
        assert int(st["CapPrm"], 16) == 1 << CAP_IPC_LOCK, (task, st["CapPrm"])
        assert int(st["CapAmb"], 16) == 0
        assert st["NoNewPrivs"] == "1"
        assert st["Seccomp"] == "2", (task, st["Seccomp"])
    st = proc_status(pid)
    assert int(st["VmLck"].split()[0]) > 0, st["VmLck"]
    # Not dumpable: /proc/PID/status of a non-dumpable process is owned by root.
    assert pathlib.Path(f"/proc/{pid}/status").stat().st_uid == 0


def sh(*args, check=True, timeout=60, **kw):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True,
                          timeout=timeout, check=check, **kw)


def nsx(ns, *args, **kw):
    """Runs a command in test-bed namespace `ns` (h1, gw1, wan, gw2, h2)."""
    return sh("ip", "netns", "exec", f"espgw-{ns}", *args, **kw)


def nspopen(ns, *args, **kw):
    return subprocess.Popen(["ip", "netns", "exec", f"espgw-{ns}", *[str(a) for a in args]],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


SCAPY_TOOLS = str(pathlib.Path(__file__).with_name("scapy_tools.py"))
# The tools of scapy_tools.py that capture: each says "ready" once its capture runs.
CAPTURES = {"listen", "esp-out", "esp-out-all", "replay"}


def scapy_bg(ns, *args):
    """A scapy_tools.py command in the background in namespace `ns`. For a capture, returns
    once the capture runs, so that what the test sends next is not missed: a fixed wait
    for scapy's start-up missed the first packets on a busy machine (as in test_tun.py)."""
    p = nspopen(ns, "/usr/bin/python3", SCAPY_TOOLS, *args)
    if args[0] in CAPTURES:
        readable, _, _ = select.select([p.stdout], [], [], 30)
        line = p.stdout.readline() if readable else ""
        assert line.strip() == "ready", (line, p.poll(), args)
    return p


def show(gw, what):
    r = sh(ESPGW, "show", what, "--json", "--control", STATE / f"{gw}.sock")
    return json.loads(r.stdout)


def metrics(gw):
    """The gateway's /metrics page as {sample line without value: value}."""
    code = ("import urllib.request;"
            "print(urllib.request.urlopen('http://127.0.0.1:9101/metrics', timeout=5).read().decode())")
    text = nsx(gw, "/usr/bin/python3", "-c", code).stdout
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out


def bed_up(*args):
    r = sh(LAB, "testbed", "up", *args, check=False, timeout=120)
    if r.returncode != 0:
        sh(LAB, "testbed", "down", check=False)
        raise RuntimeError(f"testbed up failed: {r.stderr}")


def bed_down():
    logs = {g: (STATE / f"{g}.log").read_text() if (STATE / f"{g}.log").exists() else ""
            for g in ("gw1", "gw2")}
    r = sh(LAB, "testbed", "down", check=False, timeout=60)
    assert r.returncode == 0, r.stderr
    left = [n for n in sh("ip", "netns", "list").stdout.split() if n.startswith("espgw-")]
    assert not left, f"namespaces left behind: {left}"
    return logs


def wait_for(pred, timeout=5.0, step=0.05):
    end = time.time() + timeout
    while time.time() < end:
        v = pred()
        if v:
            return v
        time.sleep(step)
    return pred()


@pytest.fixture(scope="module")
def bed():
    """The test bed with espgw gateways on AF_XDP (the default back-end)."""
    bed_up("--io", "af-xdp")
    yield "af_xdp"
    bed_down()
