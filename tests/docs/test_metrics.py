"""Every Prometheus family the gateway serves (crates/espgw/src/live/metrics.rs) is named in
the README, so that an operator wiring up dashboards finds each one; `{a,b}` in the README's
names stands for each alternative (`espgw_port_{rx,tx}_bytes_total`)."""
import itertools
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]


def served():
    source = (ROOT / "crates" / "espgw" / "src" / "live" / "metrics.rs").read_text(encoding="utf-8")
    return set(re.findall(r'"(espgw_[a-z_]+?)(?:\{|"| )', source))


def expand(name):
    """`espgw_port_{rx,tx}_bytes_total` -> both names; a trailing label set
    (`espgw_drops_total{reason}`, `{event="..."}`) is not part of the name."""
    name = re.sub(r"\{[a-z_]+(?:[=}].*)?$", "", name)
    parts = re.split(r"\{([a-z_]+(?:,[a-z_]+)+)\}", name)
    choices = [[p] if i % 2 == 0 else p.split(",") for i, p in enumerate(parts)]
    return {"".join(c) for c in itertools.product(*choices)}


def documented():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    names = set()
    for token in re.findall(r"`(espgw_[a-z_{},=]+)", readme):
        names |= expand(token)
    return names


def test_expand_reads_the_readmes_brace_form():
    assert expand("espgw_port_{rx,tx}_{packets,bytes}_total") == {
        "espgw_port_rx_packets_total", "espgw_port_rx_bytes_total",
        "espgw_port_tx_packets_total", "espgw_port_tx_bytes_total"}
    assert expand("espgw_drops_total{reason}") == {"espgw_drops_total"}
    assert expand("espgw_sa_drops_total{reason=") == {"espgw_sa_drops_total"}


def test_every_served_family_is_in_the_readme():
    families = served()
    assert {"espgw_sa_packets_total", "espgw_drops_total", "espgw_uptime_seconds"} <= families
    assert sorted(families - documented()) == []
