"""What the gateway refuses to start with (issue 17): a configuration others may read (it
holds keys), and no configuration at all (the built-in one's keys are public). Each
refusal comes before any port is opened, so these run without interfaces."""
import os
import subprocess


def default_config(espgw, path, mode):
    path.write_text(subprocess.run([str(espgw), "default-config"], capture_output=True,
                                   text=True, check=True).stdout)
    os.chmod(path, mode)
    return path


def run(espgw, *args):
    return subprocess.run([str(espgw), "run", *args], capture_output=True, text=True,
                          timeout=30)


def test_run_refuses_a_configuration_others_may_read(espgw, tmp_path):
    for mode in (0o644, 0o640, 0o604, 0o660):
        cfg = default_config(espgw, tmp_path / f"gw-{mode:o}.toml", mode)
        r = run(espgw, "--config", cfg)
        assert r.returncode != 0
        assert f"{cfg}: readable or writable by group or others (mode {mode:04o})" in r.stderr
        assert f"chmod 600 {cfg}" in r.stderr
        assert "interface" not in r.stderr, "refused before any port"


def test_run_accepts_a_private_configuration(espgw, tmp_path):
    cfg = default_config(espgw, tmp_path / "gw.toml", 0o600)
    r = run(espgw, "--config", cfg)
    # It goes on to its ports, which this machine does not have.
    assert "readable" not in r.stderr
    assert "interface south" in r.stderr, r.stderr


def test_check_only_warns(espgw, tmp_path):
    cfg = default_config(espgw, tmp_path / "gw.toml", 0o644)
    r = subprocess.run([str(espgw), "check", "--config", str(cfg)], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    assert "warning:" in r.stderr and "mode 0644" in r.stderr
    assert r.stdout.startswith("ok:")


def test_run_needs_a_configuration_or_demo(espgw):
    r = run(espgw)
    assert r.returncode != 0 and "--config" in r.stderr
    r = run(espgw, "--demo")
    assert "warning: --demo" in r.stderr and "keys are public" in r.stderr
