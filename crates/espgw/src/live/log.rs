//! Structured logs: one `key=value` line per event on standard error (logfmt), so that
//! people can read them and programs can parse them.

use std::fmt::Display;
use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

fn quote(v: &str) -> String {
    if !v.is_empty() && !v.contains([' ', '"', '=']) {
        v.to_string()
    } else {
        format!("{v:?}")
    }
}

/// Writes `ts=... level=... event=... k=v ...`.
pub fn log(level: &str, event: &str, fields: &[(&str, &dyn Display)]) {
    let ts = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    let mut line = format!("ts={ts:.3} level={level} event={event}");
    for (k, v) in fields {
        line.push(' ');
        line.push_str(k);
        line.push('=');
        line.push_str(&quote(&v.to_string()));
    }
    line.push('\n');
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

#[macro_export]
macro_rules! info {
    ($ev:expr $(, $k:literal => $v:expr)* $(,)?) => {
        $crate::live::log::log("info", $ev, &[$(($k, &$v as &dyn std::fmt::Display)),*])
    };
}

#[macro_export]
macro_rules! warn {
    ($ev:expr $(, $k:literal => $v:expr)* $(,)?) => {
        $crate::live::log::log("warn", $ev, &[$(($k, &$v as &dyn std::fmt::Display)),*])
    };
}

#[macro_export]
macro_rules! error {
    ($ev:expr $(, $k:literal => $v:expr)* $(,)?) => {
        $crate::live::log::log("error", $ev, &[$(($k, &$v as &dyn std::fmt::Display)),*])
    };
}
