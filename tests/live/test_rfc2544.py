"""The RFC 2544 tester (`espgw-lab bench rfc2544`) on its quick profile: against the tester's
own ceiling, the espgw pair, plain forwarding and strongSwan; against a stand-in DUT
whose drops, reorderings and duplicates are known exactly; its JSON checked against
the schema with jsonschema, its plots and HTML page rendered in headless Chromium;
Ctrl-C writes the partial results."""
import contextlib
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import threading
import time

import jsonschema
import pytest

from conftest import LAB, ROOT, sh, show

SCHEMA = json.loads((ROOT / "docs" / "rfc2544.schema.json").read_text())


def leftover_namespaces():
    return [n for n in sh("ip", "netns", "list").stdout.split() if n.startswith("espgw-")]


@pytest.fixture(autouse=True)
def clean_namespaces():
    yield
    sh(LAB, "testbed", "down", check=False)
    for n in leftover_namespaces():
        sh("ip", "netns", "del", n, check=False)
    assert not leftover_namespaces()


def bench(out, *args, timeout=900):
    r = sh(LAB, "bench", "rfc2544", "--out", out, *args, timeout=timeout, check=False)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    doc = json.loads((pathlib.Path(out) / "results.json").read_text())
    jsonschema.validate(doc, SCHEMA, cls=jsonschema.Draft202012Validator)
    return doc, r.stdout


def summary(doc, dut, size):
    [s] = [s for s in doc["summaries"] if s["dut"] == dut and s["frame_size"] == size]
    return s


def check_png(path):
    b = path.read_bytes()
    assert b[:8] == b"\x89PNG\r\n\x1a\n", path
    w, h = int.from_bytes(b[16:20], "big"), int.from_bytes(b[20:24], "big")
    assert (w, h) == (820, 480), (path, w, h)


def chromium():
    for c in ("chromium", "chromium-browser"):
        if shutil.which(c):
            return c
    pytest.fail("chromium is not installed (scripts/install-deps.sh installs it)")


def render(page, shot):
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-dev-shm-usage", "--no-first-run", "--virtual-time-budget=5000"]
    url = page.resolve().as_uri()
    dom = sh(chromium(), *flags, "--dump-dom", url, timeout=120).stdout
    sh(chromium(), *flags, f"--screenshot={shot}", "--window-size=1400,2400", url, timeout=120)
    return dom


def test_espgw_and_kernel_quick_profile(tmp_path):
    out = tmp_path / "report"
    doc, stdout = bench(out, "--compare", "espgw,kernel", "--quick", "--sizes", "64,1024")
    assert doc["meta"]["duts"] == ["ceiling", "espgw", "kernel"]
    assert doc["meta"]["wan_mtu"] == 1500 and "WAN MTU 1500" in stdout
    assert doc["meta"]["tester_ring_frames"] == 4096
    assert not doc["interrupted"]
    for dut in ("ceiling", "espgw", "kernel"):
        for size in ("64", "1024"):
            s = summary(doc, dut, size)
            # The search converged on a positive zero-loss rate, and the trial that
            # found it lost nothing.
            assert s["throughput_pps"] > 1000, s
            assert 1 <= s["search_trials"] <= 9
            ok = [t for t in doc["trials"] if t["dut"] == dut and t["frame_size"] == size
                  and t["test"] == "throughput" and t["lost"] == 0]
            assert ok and max(t["offered_pps"] for t in ok) >= s["throughput_pps"] * 0.999
            # Latency at that rate, every percentile in order.
            lat = s["latency"]
            assert lat["count"] > 0
            assert lat["min_ns"] <= lat["p50_ns"] <= lat["p90_ns"] <= lat["p99_ns"] \
                <= lat["p999_ns"] <= lat["max_ns"]
            assert len(s["latency_trials"]) == 2
            # Frame loss from 100% of the top rate down; back-to-back found a burst.
            assert s["loss_curve"][0][0] == pytest.approx(100.0, abs=0.01)
            assert s["back_to_back"] is not None and s["back_to_back"] > 0
            if dut != "ceiling":
                ceiling = summary(doc, "ceiling", size)["throughput_pps"]
                assert s["tester_bound"] == (s["throughput_pps"] >= 0.9 * ceiling)
    # No DUT's figure is inflated by its counting: in every trial, of every test, nothing
    # arrived that was not sent, and nothing twice. (This used to compare espgw's 64-byte
    # rate with the ceiling's, but the ceiling is one quick search at another moment, as
    # noisy as any DUT's on two shared cores: in a CI run the ceiling found 348,229
    # frames/s, espgw 383,112 and kernel forwarding 539,127.)
    for t in doc["trials"]:
        assert t["received"] <= t["sent"] and t["duplicates"] == 0, t
    assert "espgw / kernel" in stdout
    # Reports: Markdown, plots as SVG and PNG, and the HTML page renders them all.
    md = (out / "results.md").read_text()
    assert md.count("| espgw |") == 2 and md.count("| kernel |") == 2
    for name in ("throughput", "loss", "latency"):
        svg = (out / f"{name}.svg").read_text()
        assert svg.startswith("<svg") and "<polyline" in svg, name
        check_png(out / f"{name}.png")
    dom = render(out / "index.html", tmp_path / "page.png")
    assert 'data-plots="3/3"' in dom, dom[:2000]
    assert "espgw RFC 2544" in dom
    check_shot = (tmp_path / "page.png").read_bytes()
    assert check_shot[:4] == b"\x89PNG" and len(check_shot) > 20_000


def expected_faults(sent, drop, hold, dup, flows=1):
    """What the stand-in does to sequence numbers 0..sent-1 (see standin.rs)."""
    dropped = [s for s in range(sent) if s % drop == drop - 1]
    dset = set(dropped)
    dups = [s for s in range(sent) if s % dup == dup - 1 and s not in dset]
    holds = [s for s in range(sent) if s % hold == hold - 2 and s not in dset]
    # A held frame goes out right after the next frame that passes (if one does before the
    # trial ends); it is reordered when that frame is of its own flow (seq mod flows).
    def passes_own_flow(s):
        after = next((t for t in range(s + 1, sent) if t not in dset), None)
        return after is not None and after % flows == s % flows
    reordered = [s for s in holds if passes_own_flow(s)]
    return len(dropped), len(dups), len(reordered)


@pytest.mark.parametrize("flows,threads", [(1, 1), (2, 1), (2, 2)])
def test_standin_faults_are_counted_exactly(tmp_path, flows, threads):
    # Two flows: the tester counts reordering per flow, and a held frame is passed by the
    # other flow's frame, except where that one was dropped. Two tester threads per port:
    # each sends its own flows and reads its own queue, and the counts still add up.
    out = tmp_path / "standin"
    doc, _ = bench(out, "--dut", "standin", "--no-ceiling", "--quick", "--sizes", "128",
                   "--tests", "loss", "--max-rate", "20000", "--drop-every", "100",
                   "--reorder-every", "50", "--duplicate-every", "70", "--flows", str(flows),
                   "--threads", str(threads))
    assert (doc["meta"]["flows"], doc["meta"]["tester_threads"]) == (flows, threads)
    # No test bed in this run: no transport MTU to record.
    assert doc["meta"]["wan_mtu"] is None
    trials = doc["trials"]
    assert len(trials) >= 10, len(trials)
    exact = 0
    for t in trials:
        assert t["refused"] == 0, t
        lost, dups, reordered = expected_faults(t["sent"], 100, 50, 70, flows)
        if threads > 1:
            # The threads send concurrently, so which frame follows a held one at the
            # stand-in (and so whether the hold reorders its own flow) is up to the
            # scheduler: at most every hold. (No more: the stand-in keeps each flow on
            # one queue, so the two receiving threads never split a flow; see
            # test_a_relay_moving_between_cpus_reorders_no_flow.)
            reordered = min(t["reordered"], expected_faults(t["sent"], 100, 50, 70)[2])
        # The stand-in's faults follow sequence numbers, so the counts are arithmetic; the
        # kernel may still lose a frame of its own on a busy machine: an original (seen in
        # CI: 181 lost where the stand-in dropped 180), which can take a held frame's
        # reordering with it, or a duplicate's second copy (seen in CI: 153 duplicates of
        # 154, nothing extra lost; and 5 extra lost of about 17,800 sent while the machine
        # was busy). Allow such losses up to one in 2,000 frames per trial (at least two),
        # plus what the kernel itself reported dropping in that trial where the tester
        # sees it (its own receive rings overrun, the host's input backlogs full: seen in
        # CI once, 263 frames beyond the stand-in's in one trial, before the tester
        # recorded these) and what the stand-in reported losing without meaning to (its
        # rings, its sends, its interfaces), never a count beyond what the stand-in did,
        # and require most trials exact. Each frame lost so can take at most one
        # reordering with it.
        extra_lost = t["lost"] - lost
        missed_dups = dups - t["duplicates"]
        assert isinstance(t["dut_drops"], int), t
        kernel = (max(t["tester_overrun"], t["tester_interface_drops"]) + t["backlog_drops"]
                  + t["dut_drops"])
        assert extra_lost >= 0 and missed_dups >= 0, t
        assert extra_lost + missed_dups <= max(2, t["sent"] // 2000) + kernel, t
        assert reordered - 2 - kernel <= t["reordered"] <= reordered, t
        exact += (t["lost"], t["duplicates"], t["reordered"]) == (lost, dups, reordered)
        assert t["lost"] > 0 and t["duplicates"] > 0
        # With one thread every trial has a hold passed by its own flow; with two, a short
        # trial's few holds may all be passed by the other thread's flow (seen in CI: a
        # trial with 1 loss and 0 reordered), so only the run as a whole must show one.
        assert threads > 1 or t["reordered"] > 0, t
    assert sum(t["reordered"] for t in trials) > 0
    assert exact >= len(trials) - 2, f"{exact} of {len(trials)} trials exact"
    # One frame in a hundred lost at every load: the throughput search finds no rate.
    s = summary(doc, "standin", "128")
    assert s["throughput_pps"] == 0
    # Each point of the loss curve is one trial's loss, checked above against the stand-in's
    # arithmetic: one frame in a hundred of what that trial sent, rounded down, so about 1 %
    # but not exactly (seen in CI: the 10 % load's trial sent 1,998 frames and lost 19, 0.95 %).
    for _, l in s["loss_curve"]:
        trial = next((t for t in trials if abs(t["loss_pct"] - l) < 1e-9), None)
        assert trial is not None, (l, s["loss_curve"])
        assert abs(l - 100 * trial["lost"] / trial["sent"]) < 1e-9, trial
        assert 0.9 < l < 1.2, s["loss_curve"]


@contextlib.contextmanager
def cpu_stalled(cpu, busy=0.03, period=0.1, most=120):
    """While the block runs, a real-time (SCHED_FIFO) spinner takes CPU `cpu` for `busy`
    seconds in every `period`, so that a thread pinned there waits; it stops by itself
    after `most` seconds, and is killed when the block ends."""
    spin = (f"import time\nend = time.monotonic() + {most}\n"
            f"while time.monotonic() < end:\n"
            f"    t = time.monotonic() + {busy}\n"
            f"    while time.monotonic() < t: pass\n"
            f"    time.sleep({period - busy})\n")
    p = subprocess.Popen(["chrt", "-f", "50", "taskset", "-c", str(cpu), sys.executable,
                          "-c", spin])
    try:
        yield
    finally:
        p.kill()
        p.wait()


def test_the_testers_own_ring_overruns_are_counted(tmp_path):
    # The tester's smallest rings (256 frames) against the stand-in at up to 30,000 frames a
    # second, its receiving thread pinned to CPU 1 and that CPU taken 30 ms in every 100 by
    # a real-time spinner: at 30,000 pps 900 frames arrive while the thread waits, and the
    # ring overruns. The kernel's count of those overruns, read from the tester's own
    # sockets, must account for every frame lost beyond the stand-in's one in a hundred:
    # lost = the stand-in's drops + the overruns, give or take what the machine lost
    # elsewhere (the one-in-2,000 allowance of the test above, the host's input backlog
    # drops and the stand-in's own, recorded too); a frame counted as overrun that was
    # received, or lost and not counted, fails it. (Before each port's threads read the
    # kernel's counts before any frame of the trial was sent, a thread that got its CPU
    # late missed the trial's first overruns: 25-516 frames in a trial in 8 of 10 runs.)
    out = tmp_path / "overrun"
    with cpu_stalled(1):
        doc, _ = bench(out, "--dut", "standin", "--no-ceiling", "--quick", "--sizes", "64",
                       "--tests", "loss", "--max-rate", "30000", "--drop-every", "100",
                       "--tester-ring-frames", "256", "--tester-cpus", "0,1")
    trials = doc["trials"]
    assert len(trials) >= 5, len(trials)
    io = summary(doc, "standin", "64")["io"]
    for t in trials:
        dropped, _, _ = expected_faults(t["sent"], 100, 50, 70)
        unexplained = t["lost"] - dropped - t["tester_overrun"]
        allowed = max(2, t["sent"] // 2000) + t["backlog_drops"] + t["dut_drops"]
        assert 0 <= unexplained <= allowed, t
        # On a veth, a frame XDP cannot hand to a full socket is the interface's drop too:
        # two counts read apart (the socket's statistics, /proc/net/dev) that must agree.
        # (AF_PACKET, where AF_XDP is missing, drops in the socket alone.)
        if io == "af_xdp":
            assert t["tester_interface_drops"] >= t["tester_overrun"], t
    # The stalls made the ring overrun (by hand: 50,820-65,646 frames a run).
    top = max(trials, key=lambda t: t["sent"])
    assert top["tester_overrun"] > 0, top


def test_the_standins_own_drops_are_counted(tmp_path):
    # A stand-in that drops nothing on purpose but stops relaying for 40 ms after every
    # 3,000th frame, with 256-frame rings: at 30,000 frames a second about 1,200 frames
    # arrive during each stall and the kernel drops what its ring cannot hold (nothing
    # below about 6,400 frames a second). The tester asks the stand-in for its own drops
    # (the kernel's counts of its sockets and interfaces) before and after each trial,
    # and every frame lost must be one of those or of the tester's own ring overruns,
    # give or take what the machine lost elsewhere (as in the tests above).
    out = tmp_path / "stalls"
    doc, _ = bench(out, "--dut", "standin", "--no-ceiling", "--quick", "--sizes", "64",
                   "--tests", "loss", "--max-rate", "30000", "--stall-every", "3000",
                   "--stall-ms", "40", "--standin-ring-frames", "256")
    trials = doc["trials"]
    assert len(trials) >= 5, len(trials)
    for t in trials:
        unexplained = t["lost"] - t["dut_drops"] - t["tester_overrun"]
        assert 0 <= unexplained <= max(2, t["sent"] // 2000) + t["backlog_drops"], t
    # The stalls made the stand-in's ring overflow: its count, not only the arithmetic.
    top = max(trials, key=lambda t: t["sent"])
    assert top["sent"] >= 20_000 and top["dut_drops"] >= 1_000, top
    assert all(t["dut_drops"] == 0 for t in trials if t["sent"] < 3_000), trials
    # So the zero-loss rate is what the ring holds over a stall: at most 256 frames in
    # 40 ms, 6,400 frames a second (a stall can only run longer; seen: 6,380).
    tput = summary(doc, "standin", "64")["throughput_pps"]
    assert 2_000 <= tput <= 6_400 * 1.05, tput


@contextlib.contextmanager
def moving_between_cpus(pattern):
    """While the block runs, a thread moves the processes whose command line matches
    `pattern` between our first two CPUs (move_between_cpus); stopped and joined however
    the block ends."""
    stop = threading.Event()
    mover = threading.Thread(target=move_between_cpus, args=(pattern, stop))
    mover.start()
    try:
        yield
    finally:
        stop.set()
        mover.join()


def move_between_cpus(pattern, stop, period=0.003):
    """Moves every thread of every process whose command line matches `pattern` to one
    of our first two CPUs, then the other, every `period` seconds until `stop` is set (a
    relay or gateway that migrates, on demand)."""
    cpus = sorted(os.sched_getaffinity(0))[:2]
    turn = 0
    while not stop.wait(period):
        for pid in sh("pgrep", "-f", pattern, check=False).stdout.split():
            try:
                threads = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue  # it ended meanwhile
            for tid in threads:
                try:
                    os.sched_setaffinity(int(tid), {cpus[turn % 2]})
                except OSError:
                    pass  # it ended meanwhile
        turn += 1


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to move between")
def test_a_relay_moving_between_cpus_reorders_no_flow(tmp_path):
    """Two flows, two tester threads reading a queue each, and a stand-in that holds
    nothing back but is moved between the two CPUs every 3 ms while it relays. It sends
    through the qdisc, so a flow's queue comes from its hash, not from the CPU the relay
    happens to run on, and no flow reaches the tester's two threads out of order: 0
    reordered in every trial. (With the qdisc bypassed, the kernel picked the queue by
    CPU: this run counted 38 reordered frames, 304 with both CPUs busy, and CI once saw
    219 reordered where the relay held back 199.)"""
    with moving_between_cpus("bench standin --a"):
        doc, _ = bench(tmp_path / "moving", "--dut", "standin", "--no-ceiling", "--quick",
                       "--sizes", "128", "--tests", "loss", "--max-rate", "20000",
                       "--drop-every", "100", "--reorder-every", "0", "--duplicate-every",
                       "70", "--flows", "2", "--threads", "2", timeout=300)
    trials = doc["trials"]
    assert len(trials) >= 10, len(trials)
    for t in trials:
        lost, dups, _ = expected_faults(t["sent"], 100, 50, 70, 2)
        assert t["reordered"] == 0, t
        assert t["lost"] >= lost and t["duplicates"] <= dups, t
    assert sum(t["sent"] for t in trials) > 100_000, trials


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to move between")
@pytest.mark.parametrize("gateway_io,tester_io", [("af-packet", "af-xdp"), ("af-xdp", "af-packet")])
def test_senders_moving_between_cpus_reorder_no_flow(tmp_path, gateway_io, tester_io):
    """The test bed's two gateways (one unpinned worker each, interfaces of two queues,
    their I/O chosen through --run-args, which overrides the test bed's own) moved between
    the two CPUs every 3 ms while two tester threads send and read two flows: with
    AF_PACKET, the gateways' sockets and the tester's unpinned threads send through the
    qdisc, so a flow's transmit queue comes from its hash, not from the CPU the sender
    happens to be on, and no flow arrives out of order: 0 reordered in every trial. (With
    the qdisc bypassed, 27-169 frames per run were reordered with AF_PACKET gateways and
    176-324 with an AF_PACKET tester.)"""
    # The gateways' I/O through --run-args, which overrides the test bed's own --io.
    sh(LAB, "testbed", "up", "--io", "auto", "--queues", "2", "--run-args", f"--io {gateway_io}",
       timeout=120)
    with moving_between_cpus("espgw run --config"):
        doc, _ = bench(tmp_path / "moving", "--dut", "external", "--port-a", "eth0",
                       "--port-b", "eth0", "--netns-a", "espgw-h1", "--netns-b", "espgw-h2",
                       "--addr-a", "198.51.100.20/24", "--addr-b", "203.0.113.20/24",
                       "--gateway-a", "198.51.100.1", "--gateway-b", "203.0.113.1",
                       "--io", tester_io, "--no-ceiling", "--quick", "--sizes", "128",
                       "--tests", "loss", "--max-rate", "20000", "--trial-seconds", "2",
                       "--flows", "2", "--threads", "2", timeout=300)
    trials = doc["trials"]
    assert {s["io"] for s in doc["summaries"]} == {tester_io.replace("-", "_")}
    for gw in ("gw1", "gw2"):
        assert {p["io"] for p in show(gw, "ports")} == {gateway_io.replace("-", "_")}
    assert len(trials) >= 2, trials
    for t in trials:
        assert t["reordered"] == 0 and t["duplicates"] == 0, t
    assert sum(t["received"] for t in trials) > 60_000, trials


def test_tester_threads_through_the_ceiling_and_two_workers(tmp_path):
    """`--threads 2`: two sending and receiving threads per tester port, on two queues,
    through a bare veth and through the espgw pair with two workers per gateway (each
    worker's queue carries one thread's flows): both find a zero-loss rate, and no frame
    is counted twice or out of its flow's order."""
    out = tmp_path / "threads"
    doc, _ = bench(out, "--dut", "espgw", "--quick", "--sizes", "64", "--tests", "throughput",
                   "--threads", "2", "--flows", "4", "--workers", "2", "--io", "af-xdp",
                   "--tester-ring-frames", "8192")
    meta = doc["meta"]
    assert (meta["tester_threads"], meta["flows"], meta["workers"]) == (2, 4, 2)
    assert meta["tester_ring_frames"] == 8192
    # --pin-cores tester (the default) pins the tester only on 8 CPUs or more: on a smaller
    # machine nothing is pinned that was not asked for.
    assert meta["cores"] == "gateways unpinned, tester unpinned", meta["cores"]
    # Each gateway's own account of the trials (`show stats`, hash fanout: no crew): gateway
    # 1 read every frame the tester received through the pair, and both of its workers
    # read some (each has the queue of one tester thread).
    stats = {g["gateway"]: g for g in doc["gateway_stats"] if g["size"] == "64"}
    assert set(stats) == {"gw1", "gw2"}, doc["gateway_stats"]
    received = sum(t["received"] for t in doc["trials"] if t["dut"] == "espgw")
    gw1 = stats["gw1"]
    assert len(gw1["per_worker_rx"]) == 2 and min(gw1["per_worker_rx"]) > 0, gw1
    assert sum(gw1["per_worker_rx"]) >= received > 0, (gw1, received)
    assert gw1["ordered_spread"] is None and stats["gw2"]["ordered_spread"] is None
    # With hash fanout one SA goes out through both of gateway 1's workers, and in the
    # overloaded trials of the search one can fall more than the 1,024-packet replay window
    # behind the other: gateway 2 drops those as replays (a run here: 52,603 of 2.7 million).
    # Every such packet is a frame the tester counted lost.
    lost = sum(t["lost"] for t in doc["trials"] if t["dut"] == "espgw")
    assert stats["gw2"]["drops"].get("replay", 0) <= lost, (stats["gw2"], lost)
    # Each trial says what the gateways dropped in it (their counters read before and
    # after): the trials' replays add up to gateway 2's total, and a trial's replays are
    # frames it lost. The ceiling has no gateways to ask.
    espgw_trials = [t for t in doc["trials"] if t["dut"] == "espgw"]
    assert all(isinstance(t["gateway_drops"], dict) for t in espgw_trials), espgw_trials
    assert all(t["gateway_drops"] is None for t in doc["trials"] if t["dut"] == "ceiling")
    replays = [t["gateway_drops"].get("gw2 replay", 0) for t in espgw_trials]
    assert sum(replays) == stats["gw2"]["drops"].get("replay", 0), (replays, stats["gw2"])
    assert all(r <= t["lost"] for r, t in zip(replays, espgw_trials)), espgw_trials
    for dut in ("ceiling", "espgw"):
        s = summary(doc, dut, "64")
        assert s["throughput_pps"] > 1000, s
        trials = [t for t in doc["trials"] if t["dut"] == dut]
        assert any(t["lost"] == 0 and t["sent"] > 10_000 for t in trials), trials
        for t in trials:
            assert t["duplicates"] == 0 and t["reordered"] == 0 and t["refused"] == 0, t
    # A flow sent from two threads would be reordered by the tester itself: refused.
    r = sh(LAB, "bench", "rfc2544", "--out", tmp_path / "bad", "--dut", "ceiling",
           "--threads", "2", "--flows", "3", check=False)
    assert r.returncode != 0 and "not a multiple of --threads" in r.stderr, r.stderr
    # A CPU the machine does not have: refused, not ignored.
    r = sh(LAB, "bench", "rfc2544", "--out", tmp_path / "bad", "--dut", "ceiling",
           "--tester-cpus", "4095", "--quick", "--sizes", "64", "--tests", "throughput",
           check=False, timeout=120)
    assert r.returncode != 0 and "cannot run a thread on CPU 4095" in r.stderr, r.stderr


@pytest.mark.parametrize("remedy", [("--per-worker-sas",), ("--replay-window", "8192")],
                         ids=["per-worker-sas", "replay-window-8192"])
def test_no_replay_drops_with_a_set_or_a_deeper_window(tmp_path, remedy):
    """The same two workers by hash, with either remedy for one SA's numbers arriving
    further apart than its 1,024-packet window (the test above). `--per-worker-sas`:
    gateway 1's policy names a set of two SAs, one per worker, and gateway 2 keeps a
    window per SA, each in order. `--replay-window 8192`: one SA, its window as deep as two
    of the gateways' rings (what `espgw run` advises at start-up). Either way the search's
    overloaded trials drop no replay: every trial's own count says so, and so does the
    total (without a remedy, three searches here dropped 1,183, 1,426 and 1,781).
    Both of gateway 1's workers carried traffic."""
    out = tmp_path / remedy[0].strip("-")
    doc, _ = bench(out, "--dut", "espgw", "--quick", "--sizes", "64", "--tests", "throughput",
                   "--threads", "2", "--flows", "4", "--workers", "2", "--io", "af-xdp",
                   "--tester-ring-frames", "8192", *remedy)
    meta = doc["meta"]
    assert meta["workers"] == 2
    assert meta["per_worker_sas"] is (remedy[0] == "--per-worker-sas"), meta
    assert meta["replay_window"] == (8192 if remedy[0] == "--replay-window" else None), meta
    trials = [t for t in doc["trials"] if t["dut"] == "espgw"]
    assert any(t["lost"] > 0 for t in trials), "no overloaded trial: nothing was tested"
    for t in trials:
        assert "gw2 replay" not in t["gateway_drops"], t
    stats = {g["gateway"]: g for g in doc["gateway_stats"] if g["size"] == "64"}
    assert stats["gw2"]["drops"].get("replay", 0) == 0, stats["gw2"]
    assert min(stats["gw1"]["per_worker_rx"]) > 0, stats["gw1"]
    assert summary(doc, "espgw", "64")["throughput_pps"] > 1000


@pytest.mark.parametrize("wan_mtu", ["1500", "1600"])
def test_a_fragmenting_dut_is_pointed_out(tmp_path, wan_mtu):
    """At 1518 B behind the default 1500-byte transport network the espgw pair fragments
    every frame before encrypting it (1,556 bytes of ESP do not fit): the trials count a
    further fragment for each frame received, and the report says so; with --wan-mtu 1600
    the frames go whole and the report says nothing."""
    out = tmp_path / "frag"
    doc, stdout = bench(out, "--dut", "espgw", "--no-ceiling", "--quick", "--sizes", "1518",
                        "--tests", "throughput", "--max-rate", "20000", "--wan-mtu", wan_mtu)
    assert doc["meta"]["wan_mtu"] == int(wan_mtu)
    trials = [t for t in doc["trials"] if t["dut"] == "espgw"]
    received = sum(t["received"] for t in trials)
    fragments = sum(t["fragments"] for t in trials)
    assert received > 10_000, trials
    report = (out / "results.md").read_text()
    html = (out / "index.html").read_text()
    if wan_mtu == "1500":
        # One further fragment per frame (a frame counts once its first fragment is in; a
        # lost last fragment or first fragment may tip the count by a few).
        assert abs(fragments - received) <= received // 100, (fragments, received)
        for text in (stdout, report, html):
            assert "espgw at 1518: " in text and "further fragments" in text
            assert "transport MTU is 1500" in text
    else:
        assert fragments == 0, trials
        for text in (stdout, report, html):
            assert "further fragments" not in text


def test_strongswan_quick_profile(tmp_path):
    out = tmp_path / "swan"
    doc, _ = bench(out, "--dut", "strongswan", "--no-ceiling", "--quick", "--sizes", "64",
                   "--tests", "throughput,latency")
    s = summary(doc, "strongswan", "64")
    assert s["throughput_pps"] > 500, s
    assert s["algorithm"].startswith("aes128gcm16")
    assert s["latency"]["count"] > 0


def test_ctrl_c_writes_partial_results(tmp_path):
    out = tmp_path / "partial"
    p = subprocess.Popen([LAB, "bench", "rfc2544", "--out", str(out), "--dut", "espgw",
                          "--no-ceiling", "--quick", "--sizes", "64,128,256"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # Interrupt in the middle of the first frame size's tests (the test bed is up after
        # about 3 s, trials take 1.3 s each).
        time.sleep(12)
        assert p.poll() is None, p.communicate()
        p.send_signal(signal.SIGINT)
        stdout, stderr = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode != 0
    assert "interrupted" in stderr
    doc = json.loads((out / "results.json").read_text())
    jsonschema.validate(doc, SCHEMA, cls=jsonschema.Draft202012Validator)
    assert doc["interrupted"] is True
    assert doc["trials"], "the trials before Ctrl-C are kept"
    assert {t["frame_size"] for t in doc["trials"]} == {"64"}
    assert (out / "index.html").exists() and (out / "results.md").exists()


def test_external_dut_on_interfaces_the_user_names(tmp_path):
    """`--dut external` drives two interfaces it is given (here a veth pair in a namespace
    this test makes), bidirectionally, with TCP-shaped frames."""
    ns = "espgw-ext"
    sh("ip", "netns", "add", ns)
    try:
        sh("ip", "link", "add", "x0", "netns", ns, "type", "veth", "peer", "name", "x1",
           "netns", ns)
        for d in ("x0", "x1"):
            sh("ip", "-n", ns, "link", "set", d, "up")
        out = tmp_path / "ext"
        doc, _ = bench(out, "--dut", "external", "--quick", "--sizes", "128",
                       "--tests", "throughput", "--proto", "tcp", "--bidirectional",
                       "--max-rate", "30000",
                       "--port-a", "x0", "--port-b", "x1", "--netns-a", ns, "--netns-b", ns,
                       "--addr-a", "198.51.100.20/24", "--addr-b", "198.51.100.21/24",
                       "--gateway-a", "198.51.100.21", "--gateway-b", "198.51.100.20")
        assert doc["meta"]["duts"] == ["external"]
        s = summary(doc, "external", "128")
        # Paced at 30,000 frames/s each way on a bare veth pair: nothing is lost (the rate
        # actually offered can fall a little short when the machine is busy).
        assert 27000 <= s["throughput_pps"] <= 30600, s
        # The search may need more than its first trial when the machine is busy: the
        # lossless trial at the reported rate is the one that counts.
        good = [t for t in doc["trials"] if t["test"] == "throughput" and t["lost"] == 0]
        t = max(good, key=lambda t: t["sent"])
        assert t["proto"] == "tcp" and t["bidirectional"]
        assert t["sent"] == t["received"] and t["sent"] >= 2 * 27000
    finally:
        sh("ip", "netns", "del", ns, check=False)
