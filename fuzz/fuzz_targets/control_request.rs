//! Any bytes as a control-socket request line: parsed to a request or refused with a
//! reason, never a panic; a request that parses survives its own serialisation unchanged
//! (what the client sends is what the gateway reads).
#![no_main]
use espgw_control::ControlRequest;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(req) = ControlRequest::parse(data) {
        let line = serde_json::to_vec(&req.to_json()).expect("a request serialises");
        assert_eq!(ControlRequest::parse(&line), Ok(req));
    }
});
