//! `node --advertise` and `--meta`: what a node publishes about itself, as `status` shows it.

mod common;

use std::time::Duration;

use common::Site;

#[test]
fn a_node_publishes_its_address_and_labels() {
    let site = Site::new();
    site.ok(&["init", "--partitions", "4"]);
    let _node = site.node(
        "a",
        &[
            "--advertise",
            "http://10.0.0.7:8080",
            "--meta",
            "zone=eu-1",
            "--meta",
            "version=2.1",
        ],
    );
    site.wait_for(Duration::from_secs(60), "node a to register", || {
        site.status()["members"]
            .as_array()
            .is_some_and(|m| !m.is_empty())
    });
    let status = site.status();
    let member = &status["members"][0];
    assert_eq!(member["address"], "http://10.0.0.7:8080");
    assert_eq!(member["metadata"]["zone"], "eu-1");
    assert_eq!(member["metadata"]["version"], "2.1");
    let table = site.ok(&["status", "--by-node"]);
    assert!(table.contains("http://10.0.0.7:8080"), "{table}");
}

#[test]
fn what_no_store_would_keep_is_refused_at_start() {
    let site = Site::new();
    site.ok(&["init", "--partitions", "4"]);
    let long = format!("http://{}", "x".repeat(600));
    let run = site.run(&["node", "--id", "a", "--advertise", &long]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("advertise"), "{}", run.stderr);
    let run = site.run(&["node", "--id", "a", "--meta", "novalue"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("KEY=VALUE"), "{}", run.stderr);
}
