//! Each operator command's effect on a table served by running `leasehold node` processes.

mod common;

use std::thread::sleep;
use std::time::Duration;

use common::{partitions, read_log_so_far, Site, TAKEOVER};

const SETTLE: Duration = Duration::from_secs(20);

/// Starts nodes `ids` over `partitions` partitions with a shared fence log and waits until
/// every partition is held and each node holds its share.
fn fleet_of(site: &Site, ids: &[&str], partitions: usize) -> Vec<common::NodeProcess> {
    let fence = site.path("fence.log");
    let count = partitions.to_string();
    let flags = [
        "--partitions",
        &count,
        "--fence-log",
        fence.to_str().unwrap(),
    ];
    let nodes = ids.iter().map(|id| site.node(id, &flags)).collect();
    let share = partitions / ids.len();
    site.wait_for(SETTLE, "the partitions to be spread", || {
        let holders = site.holders();
        let held_by = |id: &str| {
            holders
                .values()
                .filter(|h| h.as_deref() == Some(id))
                .count()
        };
        holders.len() == partitions
            && holders.values().all(Option::is_some)
            && ids.iter().all(|id| held_by(id) >= share)
    });
    nodes
}

fn fleet(site: &Site, ids: &[&str]) -> Vec<common::NodeProcess> {
    fleet_of(site, ids, 4)
}

fn holder(site: &Site, partition: u64) -> Option<String> {
    site.holders().get(&partition).cloned().flatten()
}

fn epoch(site: &Site, partition: u64) -> u64 {
    partitions(&site.status())
        .into_iter()
        .find(|p| p.partition == partition)
        .expect("partition listed")
        .epoch
}

#[test]
fn kick_makes_the_holder_drop_the_partition() {
    let site = Site::new();
    let _nodes = fleet(&site, &["n1"]);
    let before = epoch(&site, 0);
    let out = site.ok(&["kick", "0"]);
    assert!(out.contains("partition 0: kicked; n1 drops it"), "{out}");
    site.wait_for(SETTLE, "partition 0 to be re-acquired", || {
        epoch(&site, 0) > before && holder(&site, 0).is_some()
    });
    let lost = read_log_so_far(&site.path("fence.log"))
        .into_iter()
        .any(|l| l.partition == 0 && l.event == "conflict" && l.epoch == before);
    assert!(lost, "the fence log shows n1 losing epoch {before}");
}

#[test]
fn offline_keeps_everyone_off_until_online() {
    let site = Site::new();
    let _nodes = fleet(&site, &["n1", "n2"]);
    let out = site.ok(&["offline", "1"]);
    assert!(out.contains("partition 1: offline"), "{out}");
    // Longer than a takeover: nobody may take it meanwhile.
    sleep(TAKEOVER * 2);
    let view = partitions(&site.status())
        .into_iter()
        .find(|p| p.partition == 1)
        .unwrap();
    assert_eq!((view.state.as_str(), view.holder), ("offline", None));
    let text = site.ok(&["status", "--partition", "1"]);
    assert!(text.contains("offline"), "{text}");

    site.ok(&["online", "1"]);
    site.wait_for(SETTLE, "partition 1 to be held again", || {
        holder(&site, 1).is_some()
    });
}

#[test]
fn prohibit_keeps_one_node_off_and_allow_lets_it_back() {
    let site = Site::new();
    // One node alone: kept off partition 0, it must leave it unheld however long it waits.
    let _n1 = fleet_of(&site, &["n1"], 2);
    let out = site.ok(&["prohibit", "0", "n1"]);
    assert!(out.contains("partition 0: node n1 prohibited"), "{out}");
    site.wait_for(SETTLE, "n1 to drop partition 0", || {
        read_log_so_far(&site.path("fence.log"))
            .iter()
            .any(|l| l.partition == 0 && l.event == "conflict")
    });
    sleep(TAKEOVER * 2);
    let acquisitions = |partition: u32| {
        read_log_so_far(&site.path("fence.log"))
            .iter()
            .filter(|l| l.partition == partition && l.event == "acquired")
            .count()
    };
    assert_eq!(acquisitions(0), 1, "n1 took partition 0 back");
    let view = &site.status()["partitions"][0];
    assert_eq!(view["prohibited"][0].as_str(), Some("n1"));

    // A permitted node takes it.
    let fence = site.path("fence.log");
    let _n2 = site.node("n2", &["--fence-log", fence.to_str().unwrap()]);
    site.wait_for(SETTLE, "n2 to take partition 0", || {
        holder(&site, 0).as_deref() == Some("n2")
    });
    site.ok(&["allow", "0", "n1"]);
    let view = &site.status()["partitions"][0];
    assert_eq!(view["prohibited"], serde_json::json!([]));
}

#[test]
fn drain_empties_a_node_and_undrain_lets_it_take_partitions_again() {
    let site = Site::new();
    let _nodes = fleet(&site, &["n1", "n2"]);
    site.ok(&["drain", "n1"]);
    site.wait_for(SETTLE, "n1 to hand everything to n2", || {
        site.holders().values().all(|h| h.as_deref() == Some("n2"))
    });
    let by_node: serde_json::Value =
        serde_json::from_str(&site.ok(&["status", "--by-node", "--json"])).unwrap();
    let n1 = by_node["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["node"] == "n1")
        .expect("n1 listed");
    assert_eq!(
        (n1["count"].as_u64(), n1["member"]["draining"].as_bool()),
        (Some(0), Some(true))
    );

    site.ok(&["undrain", "n1"]);
    site.wait_for(SETTLE, "n1 to hold partitions again", || {
        site.holders().values().any(|h| h.as_deref() == Some("n1"))
    });
}

#[test]
fn stale_is_healthy_with_live_nodes_and_reports_a_killed_one() {
    let site = Site::new();
    let mut nodes = fleet(&site, &["n1", "n2"]);
    // On a loaded machine one renewal can come late; a healthy table passes within a few
    // probes, while a broken one never does.
    let healthy = (0..3)
        .map(|_| site.run(&["stale", "--watch", "500ms", "--min-nodes", "2"]))
        .find(|run| run.code == 0);
    let healthy = healthy.expect("stale reported problems three times on a healthy table");
    assert!(
        healthy.stdout.contains("group default: healthy"),
        "{healthy:?}"
    );

    // A drain is listed, and is not a problem.
    site.ok(&["drain", "n2"]);
    let run = site.run(&["stale", "--watch", "10ms"]);
    assert!(
        run.stdout.contains("draining nodes (not a problem): n2"),
        "{run:?}"
    );

    nodes[0].kill();
    let report = site.run(&["stale", "--watch", "300ms", "--min-nodes", "2", "--json"]);
    assert_eq!(report.code, 1, "{report:?}");
    let document: serde_json::Value = serde_json::from_str(&report.stdout).unwrap();
    assert_eq!(document["healthy"], false);
    let live = document["live_nodes"].as_array().unwrap();
    assert!(!live.contains(&serde_json::json!("n1")), "{document}");
    assert_eq!(document["draining_nodes"], serde_json::json!(["n2"]));
}

#[test]
fn init_creates_once_and_refuses_another_count() {
    let site = Site::new();
    let out = site.ok(&["init", "--partitions", "4"]);
    assert!(
        out.contains("4 partitions created, 0 already there"),
        "{out}"
    );
    let out = site.ok(&["init", "--partitions", "4"]);
    assert!(
        out.contains("0 partitions created, 4 already there"),
        "{out}"
    );
    for other in ["6", "2"] {
        let run = site.run(&["init", "--partitions", other]);
        common::assert_clean_error(&run, &["already has 4 partitions", other]);
    }
    let table = site.ok(&["status"]);
    for column in [
        "PARTITION",
        "OWNER",
        "EPOCH",
        "STATE",
        "PROHIBITED",
        "NOTE",
        "VERSION",
        "AGE",
    ] {
        assert!(table.contains(column), "{table}");
    }
    assert!(
        table.contains("4 partitions: 0 held, 4 released"),
        "{table}"
    );

    let out = site.ok(&["destroy", "--yes"]);
    assert!(out.contains("removed 4 records"), "{out}");
    let run = site.run(&["status"]);
    common::assert_clean_error(&run, &["group default does not exist"]);
}

#[test]
fn the_record_that_nudges_settled_nodes_is_not_shown_as_a_node() {
    let site = Site::new();
    site.ok(&["init", "--partitions", "8"]);
    site.ok(&["offline", "7"]);
    site.ok(&["online", "7"]);
    let status = site.status();
    assert_eq!(status["members"], serde_json::json!([]), "{status}");
    let out = site.ok(&["status", "--by-node"]);
    assert!(!out.contains("leasehold.operator"), "{out}");
    let run = site.run(&["stale", "--watch", "10ms", "--json"]);
    let report: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(report["live_nodes"], serde_json::json!([]), "{report}");
    let run = site.run(&["drain", "leasehold.operator"]);
    common::assert_clean_error(&run, &["node leasehold.operator is not a member"]);
}
