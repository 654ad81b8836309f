//! The group record from the command line: timings set at `init`, a node that does not fit
//! them refused with both sides named, `timings` shown and changed, `destroy` keeping the
//! epoch floor.

mod common;

use std::time::Duration;

use common::{assert_clean_error, Site};

const SETTLE: Duration = Duration::from_secs(20);

/// The group's timings are [`common::FAST`]'s, which `site.node` starts nodes with.
#[test]
fn a_node_outside_the_groups_timings_is_refused_and_the_timings_change_when_all_fit() {
    let site = Site::new();
    let out = site.ok(&[
        "init",
        "--partitions",
        "4",
        "--lease-validity",
        "1s",
        "--acquire-after",
        "1300ms",
    ]);
    assert!(out.contains("4 partitions created"), "{out}");
    assert!(out.contains("lease_validity at most 1.00s"), "{out}");

    // Holds its leases for 2 s where the group's takers wait 1.3 s.
    let refused = site.run(&[
        "node",
        "--id",
        "slow",
        "--heartbeat",
        "100ms",
        "--validity",
        "2s",
        "--acquire-after",
        "3s",
    ]);
    assert_clean_error(
        &refused,
        &["node slow does not fit", "= 2s", "up to 1s", "from 1.3s"],
    );

    let _node = site.node("n1", &[]);
    site.wait_for(SETTLE, "n1 to hold every partition", || {
        site.holders().values().filter(|h| h.is_some()).count() == 4
    });
    // n1 renews for 1 s: a group allowing only 800 ms would not cover it.
    let kept = site.run(&[
        "timings",
        "--lease-validity",
        "800ms",
        "--acquire-after",
        "1300ms",
    ]);
    assert_clean_error(&kept, &["members n1 do not fit"]);
    let shown = site.ok(&["timings"]);
    assert!(shown.contains("lease_validity at most 1.00s"), "{shown}");
    assert!(!shown.contains("changing to"), "withdrawn: {shown}");
    // Takers that wait longer than n1 does: refused too.
    let longer = site.run(&[
        "timings",
        "--lease-validity",
        "1100ms",
        "--acquire-after",
        "1400ms",
    ]);
    assert_clean_error(&longer, &["members n1 do not fit"]);
    // Bounds that n1 is inside of: accepted.
    let changed = site.ok(&[
        "timings",
        "--lease-validity",
        "1050ms",
        "--acquire-after",
        "1300ms",
    ]);
    assert!(
        changed.contains("lease_validity at most 1.05s"),
        "{changed}"
    );
    let json: serde_json::Value = serde_json::from_str(&site.ok(&["timings", "--json"])).unwrap();
    assert_eq!(json["timings"]["lease_validity_ns"], 1_050_000_000u64);

    let busy = site.run(&["destroy", "--yes"]);
    assert_clean_error(&busy, &["has members (n1)", "force"]);
}

#[test]
fn a_destroyed_group_built_out_again_issues_higher_epochs() {
    let site = Site::new();
    site.ok(&["init", "--partitions", "2"]);
    for _ in 0..3 {
        site.ok(&["kick", "0"]);
    }
    let mut node = site.node("n1", &[]);
    site.wait_for(SETTLE, "n1 to hold both partitions", || {
        site.holders().values().filter(|h| h.is_some()).count() == 2
    });
    let epoch = |site: &Site| {
        let status = site.status();
        common::partitions(&status)
            .iter()
            .map(|p| p.epoch)
            .max()
            .unwrap()
    };
    let before = epoch(&site);
    assert_eq!(node.terminate(SETTLE), 0);
    site.ok(&["destroy", "--yes"]);
    let shown = site.ok(&["timings"]);
    assert!(
        shown.contains(&format!("epoch floor    {before}")),
        "{shown}"
    );
    site.ok(&["init", "--partitions", "2"]);
    let _again = site.node("n2", &[]);
    site.wait_for(SETTLE, "n2 to hold both partitions", || {
        site.holders().values().filter(|h| h.is_some()).count() == 2
    });
    let status = site.status();
    let after = common::partitions(&status);
    assert!(
        after.iter().all(|p| p.epoch > before),
        "epochs after re-creation {after:?} must exceed {before}"
    );
}
