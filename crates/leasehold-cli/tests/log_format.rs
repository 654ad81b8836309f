//! `--log-format json`: what a node logs, one JSON object a line, for a log collector.

mod common;

use std::time::Duration;

use common::Site;
use serde_json::Value;

#[test]
fn json_logs_are_one_object_a_line() {
    let site = Site::new();
    site.ok(&["init", "--partitions", "2"]);
    let mut node = site.node("a", &["--log-format", "json"]);
    site.wait_for(Duration::from_secs(60), "a lease taken, in the log", || {
        site.node_logs().contains("lease acquired")
    });
    assert_eq!(node.terminate(Duration::from_secs(30)), 0);
    let logs = std::fs::read_to_string(site.path("a.err")).expect("the node's log");
    let events: Vec<Value> = logs
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line:?}")))
        .collect();
    for event in &events {
        assert!(event["timestamp"].is_string(), "{event}");
        assert!(event["level"].is_string(), "{event}");
        assert!(event["fields"]["message"].is_string(), "{event}");
    }
    let acquired = events
        .iter()
        .find(|event| event["fields"]["message"] == "lease acquired")
        .expect("a take logged");
    assert_eq!(acquired["fields"]["node"], "a", "{acquired}");
    assert!(acquired["fields"]["epoch"].is_string() || acquired["fields"]["epoch"].is_number());
}
