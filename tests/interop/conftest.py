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
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "espgw"], cwd=ROOT, check=True)
    return ROOT / "target" / "release" / "espgw"
