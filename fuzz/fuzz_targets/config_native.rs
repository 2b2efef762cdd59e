//! Any text as a native configuration: parsed to a model or refused with an error, never a
//! panic, and never an unbounded allocation.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(cfg) = espgw_config::native::parse(text, "fuzz") {
            let _ = cfg.validate();
        }
    }
});
