//! Every command that prints a result prints one JSON document with `--json`, which this
//! test parses and reads, field by field, for each of them. (`sim --json` and `bench --json`
//! are read by their own tests.)

mod common;

use std::time::Duration;

use common::Site;
use serde_json::Value;

/// Runs `leasehold --store <site> args... --json`, which must succeed and print JSON alone.
fn json(site: &Site, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let run = site.run(&all);
    assert_eq!(run.code, 0, "leasehold {all:?}: {run:?}");
    serde_json::from_str(&run.stdout)
        .unwrap_or_else(|error| panic!("leasehold {all:?} printed no JSON ({error}): {run:?}"))
}

#[test]
fn every_command_with_a_result_prints_json() {
    let site = Site::new();
    let init = json(
        &site,
        &[
            "init",
            "--partitions",
            "4",
            "--lease-validity",
            "1s",
            "--acquire-after",
            "1300ms",
        ],
    );
    assert_eq!(init["group"], "default");
    assert_eq!(init["partitions"], 4);
    assert_eq!(init["created"], 4);
    assert_eq!(init["existing"], 0);
    assert_eq!(init["held_by_nobody"], false);
    assert_eq!(init["lease_mode"], "per_partition", "{init}");
    assert!(init["timings"].is_object(), "{init}");

    let again = json(&site, &["init", "--partitions", "4"]);
    assert_eq!(
        (&again["created"], &again["existing"]),
        (&0.into(), &4.into())
    );

    let mode = json(&site, &["lease-mode"]);
    assert_eq!(mode["lease_mode"], "per_partition");
    assert_eq!(mode["pending_lease_mode"], Value::Null);
    let changed = json(&site, &["lease-mode", "session"]);
    assert_eq!(
        (&changed["lease_mode"], &changed["changed"]),
        (&"session".into(), &true.into())
    );

    let timings = json(&site, &["timings"]);
    assert_eq!(timings["lease_mode"], "session", "{timings}");

    let offline = json(&site, &["offline", "2"]);
    assert_eq!(offline["partition"], 2);
    assert_eq!(offline["record"]["state"], "offline", "{offline}");
    let online = json(&site, &["online", "2"]);
    assert_eq!(online["partition"], 2);
    assert_ne!(online["record"]["state"], "offline", "{online}");
    let prohibit = json(&site, &["prohibit", "1", "bad-node"]);
    assert_eq!(
        prohibit["record"]["prohibited"][0], "bad-node",
        "{prohibit}"
    );
    let allow = json(&site, &["allow", "1", "bad-node"]);
    assert_eq!(allow["partition"], 1);
    let kick = json(&site, &["kick", "3"]);
    assert_eq!(kick["partition"], 3);

    let mut node = site.node("worker-1", &[]);
    site.wait_for(Duration::from_secs(30), "worker-1 to join", || {
        site.status()["members"]
            .as_array()
            .is_some_and(|members| !members.is_empty())
    });
    let drain = json(&site, &["drain", "worker-1"]);
    assert_eq!(
        (&drain["node"], &drain["draining"]),
        (&"worker-1".into(), &true.into())
    );
    let undrain = json(&site, &["undrain", "worker-1"]);
    assert_eq!(undrain["draining"], false);

    let status = json(&site, &["status"]);
    assert_eq!(
        status["partitions"].as_array().map(Vec::len),
        Some(4),
        "{status}"
    );
    // Partitions move while the node settles after the drain: healthy or not, the exit code
    // and the document agree, at every reading. A loaded machine can hold the node's
    // heartbeat back past its validity for a moment, when no node is live: read again.
    site.wait_for(
        Duration::from_secs(30),
        "stale to see worker-1 live",
        || {
            let run = site.run(&["stale", "--watch", "300ms", "--json"]);
            let stale: Value = serde_json::from_str(&run.stdout).expect("stale --json is JSON");
            assert_eq!(stale["healthy"], run.code == 0, "{run:?}");
            assert!([0, 1].contains(&run.code), "{run:?}");
            stale["live_nodes"][0] == "worker-1"
        },
    );
    assert_eq!(node.terminate(Duration::from_secs(30)), 0);

    let destroy = json(&site, &["destroy", "--yes"]);
    assert_eq!(destroy["group"], "default");
    assert!(destroy["removed"].as_u64() >= Some(4), "{destroy}");
}
