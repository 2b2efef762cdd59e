"""Shared fixtures for the interop tests: the espgw binary and a scratch directory."""
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def espgw():
    """Path of the espgw binary (built once if needed)."""
    path = os.environ.get("ESPGW_BIN")
    if path:
        return pathlib.Path(path)
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "espgw", "-p", "espgw-lab"], cwd=ROOT,
                   check=True)
    return ROOT / "target" / "release" / "espgw"


@pytest.fixture(scope="session")
def lab(espgw):
    """Path of the espgw-lab binary (traffic generator): ESPGW_LAB, else beside espgw."""
    path = os.environ.get("ESPGW_LAB")
    return pathlib.Path(path) if path else espgw.with_name("espgw-lab")


@pytest.fixture(autouse=True)
def fresh_sequence_state(tmp_path_factory, monkeypatch):
    """Each test gets a state directory of its own (ESPGW_STATE_DIR, the default of
    `--state-dir`): its SAs start at their configured sequence numbers, as the known
    answers expect. Tests of persistence pass --state-dir themselves."""
    monkeypatch.setenv("ESPGW_STATE_DIR", str(tmp_path_factory.mktemp("espgw-state")))
