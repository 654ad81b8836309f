//! `node --exclude` and `--exclude-file`, re-read on SIGHUP, on a real process.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::Site;

const WAIT: Duration = Duration::from_secs(60);

/// A record not written for this long (three lease validities of the tests' timings) is a
/// lease that ran out, whatever name it still shows: the node renews what it holds every
/// 200 ms.
const RUN_OUT: Duration = Duration::from_secs(3);

/// The partitions `node` holds: records naming it as holder, less those it stopped renewing.
/// A lease that runs out on a loaded machine (a renewal later than its validity) keeps its
/// holder's name until someone writes the record again, and a partition the node excludes
/// meanwhile it does not take back; that is a hand-off as safe as a release.
fn held_by(site: &Site, node: &str) -> BTreeSet<u64> {
    common::partitions(&site.status())
        .into_iter()
        .filter(|p| {
            p.holder.as_deref() == Some(node)
                && p.age_ms
                    .is_none_or(|age| u128::from(age) < RUN_OUT.as_millis())
        })
        .map(|p| p.partition)
        .collect()
}

#[test]
fn a_node_keeps_off_what_it_excludes_and_follows_its_file_on_sighup() {
    let site = Site::new();
    site.ok(&["init", "--partitions", "8"]);
    let file = site.path("excluded.txt");
    std::fs::write(&file, "2 # reserved\n").unwrap();
    let file_flag = file.to_str().unwrap();
    let node = site.node("a", &["--exclude", "0,1", "--exclude-file", file_flag]);
    let expect = |partitions: &[u64], what: &str| {
        let expected: BTreeSet<u64> = partitions.iter().copied().collect();
        site.wait_for(WAIT, what, || held_by(&site, "a") == expected);
    };
    expect(
        &[3, 4, 5, 6, 7],
        "a to hold all but the excluded partitions",
    );

    std::fs::write(&file, "").unwrap();
    node.signal("HUP");
    expect(
        &[2, 3, 4, 5, 6, 7],
        "a to take partition 2 once the file no longer lists it",
    );

    std::fs::write(&file, "7\n").unwrap();
    node.signal("HUP");
    expect(&[2, 3, 4, 5, 6], "a to hand partition 7 off");
    let status = site.status();
    let seven = &common::partitions(&status)[7];
    // Released; or, on a loaded machine, run out before the node read the file naming it,
    // and then not taken back. A lease that runs out after that is a hand-off that never
    // happened.
    let log = site.node_stderr("a");
    let lines: Vec<&str> = log.lines().collect();
    let adopted = lines
        .iter()
        .position(|l| l.contains("exclusion list adopted") && l.contains("excluded=3"))
        .expect("the node logs the list that excludes 7");
    let ran_out = lines[..adopted].iter().any(|line| {
        line.contains("lease lost") && line.contains("partition=7 ") && line.contains("expired")
    });
    assert!(
        seven.holder.is_none() || ran_out,
        "released, and nobody else may take it: {seven:?}"
    );

    // A bad edit is refused and changes nothing.
    std::fs::write(&file, "7, seven\n").unwrap();
    node.signal("HUP");
    site.wait_for(WAIT, "the node to report the refused list", || {
        site.node_stderr("a").contains("exclusion list refused")
    });
    assert!(
        site.node_stderr("a").contains("seven"),
        "{}",
        site.node_stderr("a")
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(held_by(&site, "a"), [2, 3, 4, 5, 6].into());
}

#[test]
fn an_exclusion_naming_a_partition_the_group_lacks_is_refused_at_start() {
    let site = Site::new();
    site.ok(&["init", "--partitions", "8"]);
    let run = site.run(&["node", "--id", "a", "--exclude", "3,9-10"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(
        run.stderr.contains("but 2 are not: 9, 10"),
        "{}",
        run.stderr
    );
    let run = site.run(&["node", "--id", "a", "--exclude", "3,x"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(
        run.stderr.contains("--exclude") && run.stderr.contains("\"x\""),
        "{}",
        run.stderr
    );
}
