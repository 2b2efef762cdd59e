"""Workers pinned to named CPUs: `espgw run --cpus LIST` (the test bed's --gw1-cpus and
--gw2-cpus pass it on; `bench rfc2544 --pin-cores auto` uses them on a machine with enough
cores) puts worker i on the i-th CPU of the list, as the kernel reports each worker
thread's affinity, and the gateways still carry traffic; a CPU the process may not run on is
refused at start-up, naming the option."""
import pathlib

from conftest import ESPGW, STATE, bed_down, bed_up, nsx, sh


def worker_affinity(gw):
    """{thread name: its Cpus_allowed_list} for the workers of gateway `gw`."""
    pid = int((STATE / f"{gw}.pid").read_text())
    out = {}
    for task in pathlib.Path(f"/proc/{pid}/task").iterdir():
        name = (task / "comm").read_text().strip()
        if name.startswith("espgw-worker"):
            status = dict(line.split(":\t", 1) for line in (task / "status").read_text().splitlines()
                          if ":\t" in line)
            out[name] = status["Cpus_allowed_list"].strip()
    return out


def test_workers_run_on_the_cpus_named():
    bed_up("--workers", "2", "--fanout", "hash", "--gw1-cpus", "1,0", "--gw2-cpus", "0")
    try:
        log = (STATE / "gw1.log").read_text()
        assert "event=pin workers=2 cpus=1,0" in log, log[-2000:]
        assert worker_affinity("gw1") == {"espgw-worker-0": "1", "espgw-worker-1": "0"}
        # More workers than CPUs: they share the list in turn.
        assert worker_affinity("gw2") == {"espgw-worker-0": "0", "espgw-worker-1": "0"}
        r = nsx("h1", "ping", "-c", "3", "-i", "0.2", "-W", "2", "203.0.113.2", check=False)
        assert r.returncode == 0, r.stdout + r.stderr
    finally:
        bed_down()


def test_a_cpu_out_of_reach_is_refused_at_start():
    r = sh(ESPGW, "run", "--demo", "--cpus", "0,8191", check=False, timeout=30)
    assert r.returncode != 0
    assert "--cpus: CPU 8191 is not one this process may run on" in r.stderr, r.stderr
