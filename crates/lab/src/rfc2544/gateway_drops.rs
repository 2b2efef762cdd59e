//! What the two espgw gateways of the test bed dropped in one trial, by reason.
//!
//! A zero-loss search fails a trial for a single lost frame. With several workers on the
//! 16-core host the searches stopped at trials that lost 0.003-0.2 % (docs/performance.md,
//! 2026-11-28), while one worker failed its trials by 1-13 %: the size of a loss says
//! overload or not, but not where the frames went. Each gateway's own counters, read before
//! and after the trial, say whether it dropped them (the pipeline's reasons: replay, ICV,
//! policy ...) or its ports did (a full receive ring, a refused transmit), or neither, in
//! which case they were lost outside it (the veths, the bridge, the tester).

use std::collections::BTreeMap;
use std::path::Path;

use espgw_control::ControlRequest;
use serde_json::Value;

/// The port counters that count frames a gateway lost at its ports.
const PORT_DROPS: [&str; 3] = ["rx_dropped", "rx_ring_full", "tx_dropped"];

/// Every drop counter of both gateways at one moment, keyed "gw2 replay" (the pipeline's
/// reason) or "gw1 north rx_ring_full" (a port's); zeros included, so that a delta sees them.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Counters(BTreeMap<String, u64>);

impl Counters {
    /// Both gateways' counters through their control sockets in `state_dir`; None when
    /// either does not answer (the trial's line then says nothing of the gateways).
    pub fn read(state_dir: &Path) -> Option<Counters> {
        let mut c = Counters::default();
        for gateway in ["gw1", "gw2"] {
            let sock = state_dir.join(format!("{gateway}.sock"));
            let ask = |what: &str| {
                espgw::live::control::request(&sock, &ControlRequest::Show(what.into())).ok()
            };
            c.add(gateway, &ask("stats")?, &ask("ports")?);
        }
        Some(c)
    }

    /// Adds one gateway's `show stats` drops and `show ports` drop counters.
    fn add(&mut self, gateway: &str, stats: &Value, ports: &Value) {
        if let Some(drops) = stats["drops"].as_object() {
            for (reason, n) in drops {
                let n = n.as_u64().unwrap_or(0);
                self.0.insert(format!("{gateway} {reason}"), n);
            }
        }
        for port in ports.as_array().into_iter().flatten() {
            let name = port["name"].as_str().unwrap_or("?");
            for field in PORT_DROPS {
                let n = port[field].as_u64().unwrap_or(0);
                self.0.insert(format!("{gateway} {name} {field}"), n);
            }
        }
    }

    /// What grew from `before` to `self`, only the counters that did. A counter absent
    /// before counts from 0 (`show stats` lists a reason once it has dropped something).
    pub fn since(&self, before: &Counters) -> BTreeMap<String, u64> {
        self.0
            .iter()
            .filter_map(|(k, &n)| {
                let d = n.saturating_sub(before.0.get(k).copied().unwrap_or(0));
                (d > 0).then(|| (k.clone(), d))
            })
            .collect()
    }
}

/// The trial line's part, e.g. "; gateways dropped gw2 replay 25, gw1 north tx_dropped 3",
/// or "; gateways dropped none"; empty without counters.
pub fn describe(delta: Option<&BTreeMap<String, u64>>) -> String {
    match delta {
        None => String::new(),
        Some(d) if d.is_empty() => "; gateways dropped none".into(),
        Some(d) => {
            let parts: Vec<String> = d.iter().map(|(k, n)| format!("{k} {n}")).collect();
            format!("; gateways dropped {}", parts.join(", "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn counters(replay: u64, ring_full: u64) -> Counters {
        let mut c = Counters::default();
        let stats = json!({"drops": {"replay": replay}});
        let ports = json!([{"name": "north", "rx_dropped": 0, "rx_ring_full": ring_full,
                            "tx_dropped": 0}]);
        c.add("gw2", &stats, &ports);
        c.add("gw1", &json!({"drops": {}}), &json!([]));
        c
    }

    /// Only what grew in the trial is reported, with the gateway, port and reason; a reason
    /// that first appears after the trial counts from zero; nothing grown reads "none".
    #[test]
    fn a_trial_reports_what_grew_and_where() {
        let before = counters(100, 7);
        let after = counters(125, 7);
        let d = after.since(&before);
        assert_eq!(d, BTreeMap::from([("gw2 replay".to_string(), 25)]));
        assert_eq!(describe(Some(&d)), "; gateways dropped gw2 replay 25");
        let mut new_reason = after.clone();
        new_reason.add("gw1", &json!({"drops": {"icv": 3}}), &json!([]));
        assert_eq!(
            describe(Some(&new_reason.since(&before))),
            "; gateways dropped gw1 icv 3, gw2 replay 25"
        );
        let grown_port = counters(100, 9).since(&before);
        assert_eq!(
            grown_port,
            BTreeMap::from([("gw2 north rx_ring_full".to_string(), 2)])
        );
        assert_eq!(
            describe(Some(&after.since(&after))),
            "; gateways dropped none"
        );
        assert_eq!(describe(None), "");
    }

    /// A counter that went down (a gateway restarted between the reads) is not a drop.
    #[test]
    fn a_counter_that_went_down_is_not_a_drop() {
        assert!(counters(10, 0).since(&counters(100, 5)).is_empty());
    }
}
