//! `stale` reports each kind of finding on its own, in text and in JSON, with exit code 1
//! for problems and 0 for what is only listed. Each test builds a table whose only finding
//! is its kind: no node runs, so every partition that should not count is offline.

mod common;

use common::{Run, Site};
use leasehold::{
    admin, Epoch, GroupName, LeaseRecord, LeaseState, LeaseStore, MemberRecord, NodeId,
    PartitionId, PutMode,
};
use leasehold_sqlite::SqliteStore;
use serde_json::{json, Value};

fn group() -> GroupName {
    GroupName::new("default").unwrap()
}

fn node(name: &str) -> NodeId {
    NodeId::new(name).unwrap()
}

fn offline() -> LeaseRecord {
    LeaseRecord {
        state: LeaseState::Offline,
        ..LeaseRecord::released()
    }
}

/// Writes records into the site's file through the library, as nodes and operators do.
fn write(site: &Site, body: impl AsyncFnOnce(&SqliteStore)) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let store = SqliteStore::open(site.path("leases.db")).await.unwrap();
        body(&store).await;
    });
}

async fn put_lease(store: &SqliteStore, partition: u32, record: LeaseRecord) {
    let partition = PartitionId(partition);
    let current = store.get_lease(&group(), partition).await.unwrap();
    let mode = current.map_or(PutMode::Create, |c| PutMode::Update(c.version));
    let written = store.put_lease(&group(), partition, &record, mode).await;
    written.unwrap();
}

async fn put_member(store: &SqliteStore, name: &str, record: MemberRecord) {
    let written = store
        .put_member(&group(), &node(name), &record, PutMode::Create)
        .await;
    written.unwrap();
}

/// A site whose partitions `0..partitions` are all offline: nothing to report.
fn quiet_site(partitions: u32) -> Site {
    let site = Site::new();
    write(&site, async |store| {
        admin::ensure_group(store, &group()).await.unwrap();
        for partition in 0..partitions {
            put_lease(store, partition, offline()).await;
        }
    });
    site
}

/// Damages the site's file with one SQL statement, as a hand edit or a bad disk would.
fn damage(site: &Site, sql: &str) {
    let connection = rusqlite::Connection::open(site.path("leases.db")).unwrap();
    assert_eq!(connection.execute(sql, []).unwrap(), 1, "{sql}");
}

/// `stale` in text and in JSON over the same table, which has no node to change it.
struct Verdict {
    text: Run,
    json: Value,
}

fn stale(site: &Site, args: &[&str]) -> Verdict {
    let mut text_args = vec!["stale", "--watch", "10ms"];
    text_args.extend_from_slice(args);
    let text = site.run(&text_args);
    text_args.push("--json");
    let json_run = site.run(&text_args);
    assert_eq!(text.code, json_run.code, "{text:?}\n{json_run:?}");
    let json = serde_json::from_str(&json_run.stdout).expect("stale --json is JSON");
    Verdict { text, json }
}

impl Verdict {
    /// Asserts the exit code, the verdict in both forms, that the text has every line of
    /// `lines`, and that the JSON shows exactly the problems named.
    fn assert(&self, code: i32, problems: &[&str], lines: &[&str]) {
        let Verdict { text, json } = self;
        assert_eq!(text.code, code, "{text:?}");
        assert_eq!(json["healthy"], json!(code == 0), "{json}");
        let (headline, status) = match code {
            0 => ("group default: healthy", "ok"),
            1 => ("group default: PROBLEMS FOUND (warning)", "warning"),
            _ => ("group default: PROBLEMS FOUND (critical)", "critical"),
        };
        assert_eq!(json["status"], status, "{json}");
        assert_eq!(text.stdout.lines().next(), Some(headline), "{text:?}");
        for line in lines {
            assert!(
                text.stdout.lines().any(|l| l == *line),
                "no line {line:?} in:\n{}",
                text.stdout
            );
        }
        assert_eq!(json_problems(json), problems, "{json}");
    }
}

/// The kinds of problem a `stale --json` document shows, by name.
fn json_problems(document: &Value) -> Vec<&'static str> {
    let listed = |field: &str| !document[field].as_array().expect(field).is_empty();
    let live = document["live_nodes"].as_array().expect("live_nodes").len() as u64;
    let min_nodes = document["min_nodes"].as_u64().expect("min_nodes");
    let kinds = [
        ("unrenewed", listed("unrenewed")),
        ("unowned", listed("unowned")),
        ("missing", document["missing_count"] != json!(0)),
        ("corrupt", listed("corrupt")),
        ("epochs back", listed("epochs_back")),
        ("too few nodes", live < min_nodes),
    ];
    kinds
        .into_iter()
        .filter(|(_, shown)| *shown)
        .map(|(name, _)| name)
        .collect()
}

/// Fails if `offline` partitions are not listed in text or JSON, or make the probe fail.
#[test]
fn offline_partitions_are_listed_and_not_a_problem() {
    let site = Site::new();
    site.ok(&["init", "--partitions", "3"]);
    for partition in ["0", "1", "2"] {
        site.ok(&["offline", partition]);
    }
    let verdict = stale(&site, &["--min-nodes", "0"]);
    verdict.assert(0, &[], &["offline partitions (not a problem): 0 1 2"]);
    assert_eq!(verdict.json["offline"], json!([0, 1, 2]));
}

/// Fails if a held lease that nobody renews is not reported with its owner.
#[test]
fn an_unrenewed_lease_is_reported_with_its_owner() {
    let site = quiet_site(3);
    write(&site, async |store| {
        let held = LeaseRecord {
            owner: Some(node("server-1")),
            epoch: Epoch(1),
            state: LeaseState::Held,
            ..LeaseRecord::released()
        };
        put_lease(store, 1, held).await;
    });
    let verdict = stale(&site, &["--min-nodes", "0"]);
    verdict.assert(1, &["unrenewed"], &["unrenewed leases: 1 (server-1)"]);
    assert_eq!(
        verdict.json["unrenewed"],
        json!([{"partition": 1, "owner": "server-1"}])
    );
}

/// Fails if released partitions, or partitions held by nobody, are not reported unowned.
#[test]
fn released_and_ownerless_partitions_are_unowned() {
    let site = quiet_site(3);
    write(&site, async |store| {
        put_lease(store, 1, LeaseRecord::released()).await;
        let ownerless = LeaseRecord {
            state: LeaseState::Held,
            ..LeaseRecord::released()
        };
        put_lease(store, 2, ownerless).await;
    });
    let verdict = stale(&site, &["--min-nodes", "0"]);
    verdict.assert(1, &["unowned"], &["unowned partitions: 1 2"]);
    assert_eq!(verdict.json["unowned"], json!([1, 2]));
}

/// Fails if partitions with no record are not reported missing, or if the count beyond the
/// listed ones is not shown.
#[test]
fn partitions_without_a_record_are_missing() {
    let site = Site::new();
    write(&site, async |store| {
        put_lease(store, 0, offline()).await;
        put_lease(store, 2, offline()).await;
    });
    let verdict = stale(&site, &["--min-nodes", "0", "--partitions", "4"]);
    verdict.assert(2, &["missing"], &["missing partitions: 1 3"]);
    assert_eq!(verdict.json["missing"], json!([1, 3]));
    assert_eq!(verdict.json["missing_count"], json!(2));

    // A stray record far out makes more gaps than are listed.
    write(&site, async |store| put_lease(store, 1100, offline()).await);
    let verdict = stale(&site, &["--min-nodes", "0"]);
    verdict.assert(2, &["missing"], &["… and 98 more missing partitions"]);
    let listed = verdict.json["missing"].as_array().unwrap();
    assert_eq!((listed.len(), listed[0].clone()), (1000, json!(1)));
    assert_eq!(verdict.json["missing_count"], json!(1098));
}

/// Fails if an unreadable lease row is not reported with what is wrong with it.
#[test]
fn an_unreadable_lease_record_is_corrupt() {
    let site = quiet_site(3);
    damage(
        &site,
        "UPDATE leases SET state = 'bogus' WHERE partition = 1",
    );
    let line = "corrupt lease 1: state \"bogus\" is not held, released or offline";
    let verdict = stale(&site, &["--min-nodes", "0"]);
    verdict.assert(2, &["corrupt"], &[line]);
    assert_eq!(verdict.json["corrupt"], json!([line]));
}

/// Fails if an unreadable member row is left out: it hides a node from every participant's
/// balancing, and an operator must see it.
#[test]
fn an_unreadable_member_record_is_corrupt() {
    let site = quiet_site(2);
    write(&site, async |store| {
        put_member(store, "server-1", MemberRecord::default()).await;
    });
    damage(
        &site,
        "UPDATE members SET draining = 7 WHERE node = 'server-1'",
    );
    let line = "corrupt member server-1: draining is 7, not 0 or 1";
    let verdict = stale(&site, &["--min-nodes", "0"]);
    verdict.assert(2, &["corrupt"], &[line]);
    assert_eq!(verdict.json["corrupt"], json!([line]));
}

/// Fails if a record below the group's epoch floor is not reported with the floor.
#[test]
fn an_epoch_below_the_group_floor_has_gone_back() {
    let site = quiet_site(3);
    write(&site, async |store| {
        admin::raise_epoch_floor(store, &group(), Epoch(5))
            .await
            .unwrap();
        let at_floor = LeaseRecord {
            epoch: Epoch(5),
            ..offline()
        };
        // Partition 1 keeps epoch 0: created again by hand, from scratch.
        put_lease(store, 0, at_floor.clone()).await;
        put_lease(store, 2, at_floor).await;
    });
    let verdict = stale(&site, &["--min-nodes", "0"]);
    verdict.assert(
        2,
        &["epochs back"],
        &[
            "epochs gone back (records re-created outside leasehold; nodes issue higher tokens): \
           1 (epoch 0, expected at least 5)",
        ],
    );
    assert_eq!(
        verdict.json["epochs_back"],
        json!([{"partition": 1, "epoch": 0, "at_least": 5}])
    );
}

/// Fails if fewer live nodes than `--min-nodes` is not a problem or is not marked TOO FEW
/// in the text, or if a member that did not renew its record counts as live.
#[test]
fn fewer_live_nodes_than_the_minimum_is_a_problem() {
    let site = quiet_site(2);
    write(&site, async |store| {
        put_member(store, "server-1", MemberRecord::default()).await;
    });
    let verdict = stale(&site, &["--min-nodes", "1"]);
    verdict.assert(
        1,
        &["too few nodes"],
        &["live nodes: 0 (), minimum 1 — TOO FEW"],
    );
    assert_eq!(verdict.json["live_nodes"], json!([]));
    assert_eq!(verdict.json["min_nodes"], json!(1));

    let verdict = stale(&site, &["--min-nodes", "0"]);
    verdict.assert(0, &[], &["live nodes: 0 (), minimum 0"]);
}

/// Fails if draining members are not listed in text or JSON, or make the probe fail.
#[test]
fn draining_nodes_are_listed_and_not_a_problem() {
    let site = quiet_site(2);
    write(&site, async |store| {
        put_member(store, "server-1", MemberRecord::default()).await;
        put_member(store, "server-2", MemberRecord::default()).await;
    });
    site.ok(&["drain", "server-2"]);
    let verdict = stale(&site, &["--min-nodes", "0"]);
    verdict.assert(0, &[], &["draining nodes (not a problem): server-2"]);
    assert_eq!(verdict.json["draining_nodes"], json!(["server-2"]));
}
