"""The operator's install: the Debian package built by `cargo deb`, installed with dpkg,
its files, user and systemd unit checked, and the installed binary forwarding ESP in the
test bed as the unprivileged user `espgw` with exactly the capabilities the unit names.

Needs root, the package (ESPGW_DEB) and the repository's binaries (ESPGW_BIN, ESPGW_LAB beside it) to build the
test bed around the installed gateway. The package is purged at the end (the system user
stays, as Debian leaves system users behind)."""
import configparser
import json
import os
import pathlib
import grp
import pwd
import re
import stat
import subprocess
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from capture import start_capture  # noqa: E402
DEB = os.environ.get("ESPGW_DEB", "")
ESPGW = os.environ.get("ESPGW_BIN", str(ROOT / "target" / "release" / "espgw"))
# The lab (test bed, frame counter) runs the installed gateway through --gateway-cmd.
LAB = os.environ.get("ESPGW_LAB", str(pathlib.Path(ESPGW).with_name("espgw-lab")))
UNIT = pathlib.Path("/usr/lib/systemd/system/espgw.service")
STATE = pathlib.Path("/run/espgw-testbed")
# The built-in configuration's gateway 1 -> gateway 2 SA (public demonstration key).
GW1_SPI = 0x1001
GW1_KEY = bytes(range(16)) + bytes.fromhex("cafe0001")

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="installs a package: root only")


def sh(*args, check=True, timeout=60):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True,
                          timeout=timeout, check=check)


@pytest.fixture(scope="module")
def installed():
    assert DEB and pathlib.Path(DEB).is_file(), f"ESPGW_DEB names no package: {DEB!r}"
    sh("dpkg", "--purge", "espgw", check=False)
    r = sh("dpkg", "-i", DEB, check=False, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    yield
    sh(LAB, "testbed", "down", check=False)
    r = sh("dpkg", "--purge", "espgw", check=False, timeout=120)
    assert r.returncode == 0, r.stderr
    assert not pathlib.Path("/usr/bin/espgw").exists()
    assert not pathlib.Path("/etc/espgw").exists()


def unit():
    # systemd unit files are INI-like; keys may repeat, which the test's unit does not do.
    p = configparser.ConfigParser(strict=True, interpolation=None)
    p.optionxform = str
    p.read(UNIT)
    return p


def unit_caps():
    """The capabilities the unit grants, as setpriv names them ("net_admin", ...)."""
    ambient = unit()["Service"]["AmbientCapabilities"].split()
    bounding = unit()["Service"]["CapabilityBoundingSet"].split()
    assert ambient == bounding, "the unit grants what it bounds, no more"
    return [c.removeprefix("CAP_").lower() for c in ambient]


def cap_mask(names):
    bits = {"net_admin": 12, "net_raw": 13, "ipc_lock": 14, "sys_admin": 21, "bpf": 39}
    return sum(1 << bits[n] for n in names)


def as_espgw(caps):
    """setpriv words that run a command as espgw with exactly `caps` (and no new
    privileges), as the unit's User=, AmbientCapabilities=, CapabilityBoundingSet= and
    NoNewPrivileges= do."""
    c = ",".join(f"+{n}" for n in caps)
    return ["setpriv", "--reuid", "espgw", "--regid", "espgw", "--clear-groups",
            "--no-new-privs", "--bounding-set", f"-all,{c}", "--inh-caps", f"-all,{c}",
            "--ambient-caps", f"-all,{c}"]


def test_package_holds_the_binary_unit_config_and_manual(installed):
    files = sh("dpkg", "-L", "espgw").stdout.split()
    for f in ["/usr/bin/espgw", str(UNIT), "/etc/espgw/espgw.toml",
              "/usr/share/man/man8/espgw.8.gz", "/usr/share/doc/espgw/README.md"]:
        assert f in files, f
    conffiles = pathlib.Path("/var/lib/dpkg/info/espgw.conffiles").read_text().split()
    assert conffiles == ["/etc/espgw/espgw.toml"]
    cfg = os.stat("/etc/espgw/espgw.toml")
    assert stat.S_IMODE(cfg.st_mode) == 0o600
    assert pwd.getpwuid(cfg.st_uid).pw_name == "espgw"
    etc = os.stat("/etc/espgw")
    assert stat.S_IMODE(etc.st_mode) == 0o750 and grp.getgrgid(etc.st_gid).gr_name == "espgw"
    assert "espgw" in sh("man", "-l", "/usr/share/man/man8/espgw.8.gz").stdout


def test_depends_name_every_linked_library(installed):
    depends = sh("dpkg-deb", "-f", DEB, "Depends").stdout
    for lib in ["libipsec-mb1", "libxdp1", "libbpf1", "libc6", "adduser"]:
        assert re.search(rf"\b{re.escape(lib)}\b", depends), (lib, depends)
    # Every shared library the installed binary loads comes from a package it depends on,
    # directly or through one it names (libgcc-s1 comes with libc6).
    named = re.findall(r"([a-z0-9][a-z0-9.+-]+)", re.sub(r"\([^)]*\)", "", depends))
    reachable = set(named)
    for pkg in named:
        deps = sh("dpkg-query", "-W", "-f=${Depends} ${Pre-Depends}", pkg).stdout
        reachable |= set(re.findall(r"([a-z0-9][a-z0-9.+-]+)", re.sub(r"\([^)]*\)", "", deps)))
    libs = re.findall(r"=> (/\S+)", sh("ldd", "/usr/bin/espgw").stdout)
    assert len(libs) >= 4, libs
    for lib in libs:
        real = os.path.realpath(lib)
        owner = sh("dpkg", "-S", real, check=False).stdout or sh("dpkg", "-S", lib).stdout
        pkg = owner.split(":")[0]
        assert pkg in reachable, (lib, pkg, depends)


def test_system_user(installed):
    u = pwd.getpwnam("espgw")
    assert u.pw_uid < 1000, "a system user"
    assert u.pw_shell.endswith("nologin")
    assert grp.getgrgid(u.pw_gid).gr_name == "espgw"


def test_unit_verifies_and_is_hardened(installed):
    r = sh("systemd-analyze", "verify", UNIT, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "espgw.service" not in r.stderr, r.stderr
    s = unit()["Service"]
    assert s["User"] == "espgw"
    assert s["ExecStart"] == "/usr/bin/espgw run --config /etc/espgw/espgw.toml"
    assert "-HUP" in s["ExecReload"] and "$MAINPID" in s["ExecReload"]
    assert s["Restart"] == "on-failure"
    for key, want in [("NoNewPrivileges", "yes"), ("ProtectSystem", "strict"),
                      ("ProtectHome", "yes"), ("PrivateTmp", "yes"),
                      ("StateDirectory", "espgw"), ("RuntimeDirectory", "espgw")]:
        assert s[key] == want, key
    caps = unit_caps()
    assert "sys_admin" not in caps
    assert sorted(caps) == ["bpf", "ipc_lock", "net_admin", "net_raw"]
    # Installed, not enabled: the example configuration must be edited first.
    assert not pathlib.Path("/etc/systemd/system/multi-user.target.wants/espgw.service").exists()


def test_installed_binary_names_its_build(installed):
    out = sh("/usr/bin/espgw", "--version").stdout
    assert out.startswith("espgw ")
    assert re.search(r"^commit: [0-9a-f]{7,}", out, re.M), out
    assert re.search(r"^crypto back-ends: intel-ipsec-mb, aws-lc-rs", out, re.M), out
    assert re.search(r"^port back-ends: af_xdp, af_packet, tun", out, re.M), out


def test_only_espgw_reads_the_configuration(installed):
    ok = sh(*as_espgw(unit_caps()), "/usr/bin/espgw", "check", "--config",
            "/etc/espgw/espgw.toml", check=False)
    assert ok.returncode == 0, ok.stderr
    assert "spi 0x00001001" in ok.stdout
    other = sh("setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups",
               "cat", "/etc/espgw/espgw.toml", check=False)
    assert other.returncode != 0 and "Permission denied" in other.stderr


def gateway_pids():
    return [int((STATE / f"{g}.pid").read_text()) for g in ("gw1", "gw2")]


def status(pid):
    fields = {}
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        k, _, v = line.partition(":")
        fields[k] = v.split()
    return fields


def private_configs():
    """The test bed's two configurations as files of `espgw` only (mode 0600, in the test
    bed's directory, which espgw may enter): what the unprivileged gateways can read and
    what the gateway accepts (it refuses a configuration others may read)."""
    uid = pwd.getpwnam("espgw").pw_uid
    paths = []
    for name, extra in (("pkg-gw1.toml", []), ("pkg-gw2.toml", ["--peer"])):
        path = STATE / name
        path.write_text(sh(ESPGW, "default-config", *extra).stdout)
        os.chmod(path, 0o600)
        os.chown(path, uid, -1)
        paths.append(path)
    return ["--gw1-config", paths[0], "--gw2-config", paths[1]]


def watch_and_ping(count):
    """Counts frames on the transport bridge while h1 pings h2."""
    watch = subprocess.Popen(["ip", "netns", "exec", "espgw-wan", LAB, "testbed", "watch",
                              "--interface", "br0", "--seconds", "4"],
                             stdout=subprocess.PIPE, text=True)
    time.sleep(0.5)
    ping = sh("ip", "netns", "exec", "espgw-h1", "ping", "-c", count, "-i", "0.2", "-W", "2",
              "203.0.113.2", check=False, timeout=30)
    out, _ = watch.communicate(timeout=30)
    return ping.stdout, json.loads(out)


@pytest.mark.parametrize("io,caps", [
    ("af-xdp", None),       # the unit's capabilities
    ("af-packet", None),
    ("af-packet", ["net_raw"]),  # the README's claim: AF_PACKET needs CAP_NET_RAW alone
])
def test_installed_gateway_forwards_esp_without_root(installed, io, caps):
    caps = caps or unit_caps()
    # The test bed's gateways create their control sockets in its state directory.
    STATE.mkdir(exist_ok=True)
    os.chown(STATE, pwd.getpwnam("espgw").pw_uid, -1)
    gateway = " ".join(as_espgw(caps) + ["/usr/bin/espgw"])
    up = sh(LAB, "testbed", "up", "--io", io, "--gateway-cmd", gateway,
            *private_configs(), check=False, timeout=120)
    try:
        assert up.returncode == 0, up.stderr
        uid = pwd.getpwnam("espgw").pw_uid
        for pid in gateway_pids():
            st = status(pid)
            assert st["Name"] == ["espgw"]
            assert st["Uid"] == [str(uid)] * 4, st["Uid"]
            # Started with `caps`, it keeps CAP_IPC_LOCK alone once its ports are open (where
            # it was given it; for mlockall), under a seccomp filter; the bounding set is the
            # unit's (dropping from it needs CAP_SETPCAP, which the service does not have).
            kept = cap_mask([c for c in caps if c == "ipc_lock"])
            assert int(st["CapEff"][0], 16) == kept, st["CapEff"]
            assert int(st["CapPrm"][0], 16) == kept, st["CapPrm"]
            assert int(st["CapAmb"][0], 16) == 0, st["CapAmb"]
            assert int(st["CapBnd"][0], 16) == cap_mask(caps), st["CapBnd"]
            assert st["NoNewPrivs"] == ["1"]
            assert st["Seccomp"] == ["2"], st["Seccomp"]
            if kept:
                assert int(st["VmLck"][0]) > 0, st["VmLck"]
            # Not dumpable (PR_SET_DUMPABLE 0, set before any key is read): no core dump,
            # and the kernel hands its /proc files to root (a dumpable process of espgw's,
            # `sleep` under the same setpriv, has its status file owned by espgw).
            assert os.stat(f"/proc/{pid}/status").st_uid == 0
        ping, frames = watch_and_ping(10)
        received = int(re.search(r"(\d+) received", ping).group(1))
        assert received >= 9, ping  # the first may wait for ARP on the way
        assert frames["esp"] >= 2 * received, frames
        assert frames["plaintext_ip"] == 0, frames
        stats = sh(ESPGW, "show", "stats", "--control", STATE / "gw1.sock").stdout
        assert re.search(r"^encrypted: [1-9]", stats, re.M), stats
        assert re.search(r"^decrypted: [1-9]", stats, re.M), stats
        # ExecReload: SIGHUP reloads the configuration, unprivileged too.
        os.kill(gateway_pids()[0], 1)
        time.sleep(0.5)
        stats = sh(ESPGW, "show", "stats", "--control", STATE / "gw1.sock").stdout
        assert re.search(r"^reloads: 1$", stats, re.M), stats
    finally:
        down = sh(LAB, "testbed", "down", check=False, timeout=60)
        assert down.returncode == 0, down.stderr


def test_installed_esp_decrypts_in_tshark(installed, tmp_path):
    """The ESP the unprivileged gateway sends is valid AES-GCM for an independent
    decoder: tshark decrypts it with the configuration's key and finds every ICV good."""
    STATE.mkdir(exist_ok=True)
    os.chown(STATE, pwd.getpwnam("espgw").pw_uid, -1)
    gateway = " ".join(as_espgw(unit_caps()) + ["/usr/bin/espgw"])
    up = sh(LAB, "testbed", "up", "--io", "af-xdp", "--gateway-cmd", gateway,
            *private_configs(), check=False, timeout=120)
    pcap = tmp_path / "wan.pcap"
    try:
        assert up.returncode == 0, up.stderr
        cap = start_capture("espgw-wan", "br0", pcap, 4)
        sh("ip", "netns", "exec", "espgw-h1", "ping", "-c", "5", "-i", "0.2", "-W", "2",
           "203.0.113.2", check=False, timeout=30)
        cap.wait(timeout=30)
    finally:
        sh(LAB, "testbed", "down", check=False, timeout=60)
    uat = (f'uat:esp_sa:"IPv4","192.0.2.1","192.0.2.2","0x{GW1_SPI:08x}",'
           f'"AES-GCM with 16 octet ICV [RFC4106]","0x{GW1_KEY.hex()}","NULL",""')
    out = sh("tshark", "-r", pcap, "-o", "esp.enable_encryption_decode:TRUE",
             "-o", "esp.enable_authentication_check:TRUE", "-o", uat, "-V",
             "-Y", f"esp.spi == 0x{GW1_SPI:08x}", timeout=120).stdout
    assert out.count("Encapsulating Security Payload") >= 4, out[-2000:]
    assert out.count("Echo (ping) request") >= 4, out[-2000:]
    assert "[Bad: True]" not in out and "incorrect, should be" not in out
