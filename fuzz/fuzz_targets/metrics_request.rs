//! Any bytes as the head of a metrics (HTTP) request: `GET /metrics` or not found, never a
//! panic; only the first line decides (what follows cannot turn a refusal into a scrape).
#![no_main]
use espgw_control::{head_complete, MetricsRequest};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let verdict = MetricsRequest::parse(data);
    let _ = head_complete(data);
    if let Some(end) = data.iter().position(|&b| b == b'\n') {
        let mut changed = data[..=end].to_vec();
        changed.extend_from_slice(b"GET /metrics HTTP/1.1\r\n\r\n");
        assert_eq!(MetricsRequest::parse(&changed), verdict);
    }
});
