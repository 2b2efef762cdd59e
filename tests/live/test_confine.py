"""Start-up refusals of the switch to an unprivileged user (issue 17): a user that does not
exist, and a state directory the user cannot reach after the switch, each stop the gateway
at start with a message that says so (not at its first sequence-number renewal)."""
import os
import subprocess
import tempfile

import pytest

from conftest import ESPGW, GATEWAY_USER, sh

NS = "espgw-confine"


@pytest.fixture
def one_veth_ns(tmp_path):
    sh("ip", "netns", "del", NS, check=False)
    sh("ip", "netns", "add", NS)
    sh("ip", "-n", NS, "link", "add", "south", "type", "veth", "peer", "name", "north")
    cfg = tmp_path / "gw.toml"
    cfg.write_text(sh(ESPGW, "default-config").stdout)
    os.chmod(cfg, 0o600)
    yield cfg
    sh("ip", "netns", "del", NS, check=False)
    assert NS not in sh("ip", "netns", "list").stdout


def run(cfg, *args):
    return subprocess.run(["ip", "netns", "exec", NS, ESPGW, "run", "--config", str(cfg),
                           "--io", "af-packet", "--control", str(cfg.parent / "gw.sock"),
                           *args], capture_output=True, text=True, timeout=30)


def test_unknown_user_is_refused(one_veth_ns, tmp_path):
    r = run(one_veth_ns, "--state-dir", str(tmp_path / "state"), "--user", "espgw-no-such-user")
    assert r.returncode != 0
    assert "--user espgw-no-such-user: no such user" in r.stderr, r.stderr


def test_state_directory_out_of_the_users_reach_is_refused_at_start(one_veth_ns):
    # A parent only root may enter: root can create the directory, the user cannot use it.
    private = tempfile.mkdtemp(prefix="espgw-root-only-")
    os.chmod(private, 0o700)
    try:
        r = run(one_veth_ns, "--state-dir", os.path.join(private, "state"), "--user",
                GATEWAY_USER)
        assert r.returncode != 0
        assert "Permission denied" in r.stderr and "after switching to uid" in r.stderr, r.stderr
        assert "event=confined" in r.stderr  # it got as far as the switch, and stopped there
    finally:
        sh("rm", "-rf", private)
