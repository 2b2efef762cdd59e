"""The README and SECURITY.md say how many system calls the gateway's seccomp filter allows;
the number is the length of `ALLOWED` in crates/espgw/src/live/confine.rs, which grows
when a call is added (SECURITY.md said 70 after the list had reached 71)."""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]


def allowed():
    source = (ROOT / "crates/espgw/src/live/confine.rs").read_text(encoding="utf-8")
    body = re.search(r"pub const ALLOWED: &\[libc::c_long\] = &\[(.*?)\n\];", source, re.S)
    return re.findall(r"libc::SYS_\w+", body.group(1))


def test_the_documents_give_the_filters_length():
    calls = allowed()
    assert len(calls) > 40 and len(set(calls)) == len(calls)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    security = (ROOT / "SECURITY.md").read_text(encoding="utf-8")
    assert re.findall(r"`SECCOMP_FILTER_FLAG_TSYNC`\): (\d+) system calls", readme) == [str(len(calls))]
    assert re.findall(r"system call outside the (\d+) it uses", security) == [str(len(calls))]
