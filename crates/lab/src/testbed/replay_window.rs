//! The built-in configurations with another replay window on every SA
//! (`testbed up --replay-window`, `bench rfc2544 --replay-window`).
//!
//! Why the test bed has it: gateway 2 reads one SA on as many queues as gateway 1 has
//! workers (a veth delivers on the queue its sender used), and each queue's ring holds up
//! to half the UMEM's frames. When one worker's ring backs up behind the others', the
//! SA's window moves on past the numbers still waiting there, and they are dropped as
//! replays. A window as deep as the rings keeps them; comparing the two on one run says
//! whether a trial's loss was that or something else.
//!
//! Like `per_worker`, it rewrites the native format's text line by line, and only the
//! test bed's own configurations: every `replay_window = N` line of an `[[sa]]` table.

use espgw_config::MAX_REPLAY_WINDOW;

/// `text` with every SA's `replay_window` set to `window`. An SA without the line keeps the
/// default: the built-in configurations name it on every SA, which the tests check.
pub fn with_replay_window(text: &str, window: u32) -> Result<String, String> {
    if window > MAX_REPLAY_WINDOW {
        return Err(format!(
            "--replay-window {window} exceeds the maximum of {MAX_REPLAY_WINDOW}"
        ));
    }
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let is_window = line
            .split_once('=')
            .is_some_and(|(k, _)| k.trim() == "replay_window");
        if is_window {
            out.push_str(&format!("replay_window = {window}"));
        } else {
            out.push_str(line);
        }
        out.push('\n');
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testbed::parse_native as parse;
    use espgw_config::{DEFAULT_CONFIG, DEFAULT_PEER_CONFIG};

    /// Every SA of both built-in configurations gets the new window (and nothing else
    /// changes); a per-worker set made from the result keeps it.
    #[test]
    fn every_sa_of_the_built_in_configurations_gets_the_window() {
        for base in [DEFAULT_CONFIG, DEFAULT_PEER_CONFIG] {
            let before = parse(base);
            assert!(before.sas.iter().all(|s| s.replay_window != 8192));
            let after = parse(&with_replay_window(base, 8192).unwrap());
            assert_eq!(after.sas.len(), before.sas.len());
            for (a, b) in after.sas.iter().zip(&before.sas) {
                assert_eq!(a.replay_window, 8192, "SA {:#x}", a.spi);
                assert_eq!((a.spi, a.direction), (b.spi, b.direction));
            }
            assert_eq!(after.policies.len(), before.policies.len());
            let text = with_replay_window(base, 4096).unwrap();
            let set = parse(&super::super::per_worker::per_worker_config(&text, 2).unwrap());
            assert!(set.sas.iter().all(|s| s.replay_window == 4096));
        }
    }

    #[test]
    fn a_window_beyond_the_maximum_is_refused() {
        assert!(with_replay_window(DEFAULT_CONFIG, MAX_REPLAY_WINDOW).is_ok());
        let e = with_replay_window(DEFAULT_CONFIG, MAX_REPLAY_WINDOW + 1).unwrap_err();
        assert!(e.contains("exceeds the maximum"), "{e}");
    }
}
