//! What a client may ask the running gateway, parsed from untrusted bytes.
//!
//! The control socket takes one JSON object per connection, on one line:
//! `{"cmd":"show","what":"sas"}`, `{"cmd":"reload","path":"/etc/espgw/espgw.toml"}` (path
//! optional: the current file), `{"cmd":"stop"}`. The metrics endpoint answers `GET
//! /metrics` (or `/`) and nothing else. Both parsers take at most what the server read
//! (bounded there) and never panic; `fuzz/` holds a target for each.
#![forbid(unsafe_code)]

use serde_json::{json, Value};
use std::path::PathBuf;

/// The most a control request may hold (the server reads no more).
pub const MAX_CONTROL_REQUEST: usize = 64 * 1024;
/// The most of a metrics request head the server reads.
pub const MAX_METRICS_HEAD: usize = 4096;

/// A control-socket request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ControlRequest {
    /// `espgw show WHAT`.
    Show(String),
    /// `espgw reload [--config PATH]`.
    Reload(Option<PathBuf>),
    /// `espgw stop`.
    Stop,
}

/// Why a control request was refused (sent back to the client).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestError {
    TooLong,
    NotJson(String),
    UnknownCommand,
    /// A field of the wrong type.
    Field(&'static str),
}

impl std::fmt::Display for RequestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RequestError::TooLong => write!(f, "request longer than {MAX_CONTROL_REQUEST} bytes"),
            RequestError::NotJson(e) => write!(f, "bad request: {e}"),
            RequestError::UnknownCommand => write!(f, "unknown command (show, reload, stop)"),
            RequestError::Field(name) => write!(f, "bad request: '{name}' must be a string"),
        }
    }
}

impl std::error::Error for RequestError {}

impl ControlRequest {
    /// Parses one request line (its trailing newline optional).
    pub fn parse(line: &[u8]) -> Result<ControlRequest, RequestError> {
        if line.len() > MAX_CONTROL_REQUEST {
            return Err(RequestError::TooLong);
        }
        let v: Value =
            serde_json::from_slice(line).map_err(|e| RequestError::NotJson(e.to_string()))?;
        let text = |name: &'static str| -> Result<Option<String>, RequestError> {
            match &v[name] {
                Value::Null => Ok(None),
                Value::String(s) => Ok(Some(s.clone())),
                _ => Err(RequestError::Field(name)),
            }
        };
        match text("cmd")?.as_deref() {
            Some("show") => Ok(ControlRequest::Show(text("what")?.unwrap_or_default())),
            Some("reload") => Ok(ControlRequest::Reload(text("path")?.map(PathBuf::from))),
            Some("stop") => Ok(ControlRequest::Stop),
            _ => Err(RequestError::UnknownCommand),
        }
    }

    /// The request as the client sends it.
    pub fn to_json(&self) -> Value {
        match self {
            ControlRequest::Show(what) => json!({"cmd": "show", "what": what}),
            ControlRequest::Reload(Some(p)) => {
                json!({"cmd": "reload", "path": p.to_string_lossy()})
            }
            ControlRequest::Reload(None) => json!({"cmd": "reload"}),
            ControlRequest::Stop => json!({"cmd": "stop"}),
        }
    }
}

/// What a metrics request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsRequest {
    /// `GET /metrics` or `GET /`.
    Metrics,
    /// Anything else: answered 404.
    NotFound,
}

impl MetricsRequest {
    /// Parses the request line at the start of `head` (the bytes read so far).
    pub fn parse(head: &[u8]) -> MetricsRequest {
        let head = &head[..head.len().min(MAX_METRICS_HEAD)];
        let line_end = head
            .iter()
            .position(|&b| b == b'\r' || b == b'\n')
            .unwrap_or(head.len());
        let mut parts = head[..line_end]
            .split(|&b| b == b' ')
            .filter(|p| !p.is_empty());
        match (parts.next(), parts.next()) {
            (Some(b"GET"), Some(b"/metrics" | b"/")) => MetricsRequest::Metrics,
            _ => MetricsRequest::NotFound,
        }
    }
}

/// Whether `buf` holds a whole request head (the blank line that ends it).
pub fn head_complete(buf: &[u8]) -> bool {
    buf.windows(4).any(|w| w == b"\r\n\r\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_requests() {
        assert_eq!(
            ControlRequest::parse(b"{\"cmd\":\"show\",\"what\":\"sas\"}\n"),
            Ok(ControlRequest::Show("sas".into()))
        );
        assert_eq!(
            ControlRequest::parse(br#"{"cmd":"reload","path":"/etc/espgw/x.toml"}"#),
            Ok(ControlRequest::Reload(Some("/etc/espgw/x.toml".into())))
        );
        assert_eq!(
            ControlRequest::parse(br#"{"cmd":"reload"}"#),
            Ok(ControlRequest::Reload(None))
        );
        assert_eq!(
            ControlRequest::parse(br#"{"cmd":"stop"}"#),
            Ok(ControlRequest::Stop)
        );
        assert_eq!(
            ControlRequest::parse(br#"{"cmd":"exec"}"#),
            Err(RequestError::UnknownCommand)
        );
        assert_eq!(
            ControlRequest::parse(br#"{"cmd":"reload","path":7}"#),
            Err(RequestError::Field("path"))
        );
        assert!(matches!(
            ControlRequest::parse(b"[1,2"),
            Err(RequestError::NotJson(_))
        ));
        assert_eq!(
            ControlRequest::parse(&vec![b' '; MAX_CONTROL_REQUEST + 1]),
            Err(RequestError::TooLong)
        );
        for r in [
            ControlRequest::Show("ports".into()),
            ControlRequest::Reload(Some("/a b".into())),
            ControlRequest::Reload(None),
            ControlRequest::Stop,
        ] {
            let line = serde_json::to_vec(&r.to_json()).unwrap();
            assert_eq!(ControlRequest::parse(&line), Ok(r));
        }
    }

    #[test]
    fn metrics_requests() {
        use MetricsRequest::*;
        assert_eq!(
            MetricsRequest::parse(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
            Metrics
        );
        assert_eq!(MetricsRequest::parse(b"GET / HTTP/1.0\r\n\r\n"), Metrics);
        assert_eq!(
            MetricsRequest::parse(b"GET /metricsx HTTP/1.1\r\n\r\n"),
            NotFound
        );
        assert_eq!(
            MetricsRequest::parse(b"POST /metrics HTTP/1.1\r\n\r\n"),
            NotFound
        );
        assert_eq!(MetricsRequest::parse(b"GET\r\n/metrics\r\n"), NotFound);
        assert_eq!(MetricsRequest::parse(b""), NotFound);
        assert_eq!(MetricsRequest::parse(&[0xff; 10_000]), NotFound);
        assert!(head_complete(b"GET / HTTP/1.1\r\n\r\n"));
        assert!(!head_complete(b"GET / HTTP/1.1\r\n"));
    }
}
