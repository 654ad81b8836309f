//! Concurrent batches, schema versions and connection settings. Change hints are checked by
//! the conformance suite.

mod common;

use std::time::Duration;

use leasehold::testing::unique_group;
use leasehold::{
    Change, Epoch, GroupName, GroupRecord, LeaseRecord, LeaseState, LeaseStore, LeaseWrite,
    MemberRecord, NodeId, PartitionId, PutMode, StoreError,
};
use leasehold_postgres::{PostgresOptions, PostgresStore, SCHEMA_VERSION};

/// Renews every lease of `group` in one batch, in the given partition order.
async fn renew_all(store: &PostgresStore, group: &leasehold::GroupName, order: &[u32]) -> usize {
    let listing = store.list_leases(group).await.expect("list");
    let writes: Vec<LeaseWrite> = order
        .iter()
        .map(|&partition| {
            let current = &listing.records[partition as usize];
            let mut record = current.value.clone();
            record.epoch = record.epoch.next();
            LeaseWrite {
                partition: PartitionId(partition),
                record,
                mode: PutMode::Update(current.version.clone()),
            }
        })
        .collect();
    let results = store
        .put_leases(group, &writes)
        .await
        .expect("a batch never fails as a whole (no deadlock)");
    for result in &results {
        assert!(
            matches!(result, Ok(_) | Err(StoreError::Conflict { .. })),
            "{result:?}"
        );
    }
    results.iter().filter(|r| r.is_ok()).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_batches_in_opposite_orders_do_not_deadlock() {
    let Some(url) = common::url() else {
        return;
    };
    let (first, second) = (common::store(&url).await, common::store(&url).await);
    let group = unique_group("deadlock");
    let partitions = 30;
    for partition in 0..partitions {
        first
            .put_lease(
                &group,
                PartitionId(partition),
                &LeaseRecord::released(),
                PutMode::Create,
            )
            .await
            .unwrap();
    }
    let forward: Vec<u32> = (0..partitions).collect();
    let backward: Vec<u32> = (0..partitions).rev().collect();
    let rounds = 20;
    let (a, b) = tokio::join!(
        async {
            let mut applied = 0;
            for _ in 0..rounds {
                applied += renew_all(&first, &group, &forward).await;
            }
            applied
        },
        async {
            let mut applied = 0;
            for _ in 0..rounds {
                applied += renew_all(&second, &group, &backward).await;
            }
            applied
        }
    );
    let listing = first.list_leases(&group).await.unwrap();
    let epochs: usize = listing
        .records
        .iter()
        .map(|r| r.value.epoch.0 as usize)
        .sum();
    assert_eq!(epochs, a + b, "every applied write and only those");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_store_refuses_a_newer_schema() {
    let Some(url) = common::url() else {
        return;
    };
    let prefix = format!("schema_test_{}", std::process::id());
    let options = common::test_options(&url).table_prefix(&prefix);
    PostgresStore::connect(options.clone())
        .await
        .expect("creates the layout");
    let client = common::raw_client(&url).await;
    client
        .execute(
            &format!("UPDATE {prefix}_schema SET version = $1"),
            &[&(SCHEMA_VERSION + 1)],
        )
        .await
        .unwrap();
    let refused = PostgresStore::connect(options).await;
    common::drop_layout(&client, &prefix).await;
    match refused {
        Err(StoreError::Invalid(message)) => {
            let newer = format!("version {}", SCHEMA_VERSION + 1);
            assert!(message.contains(&newer), "{message}")
        }
        other => panic!("expected Invalid, got {other:?}"),
    }
}

/// The layout as version 1 created it, before change hints said what changed, group records
/// and published timings, with one lease (version 1) and one member (version 2) of group
/// `orders`.
fn layout_v1(prefix: &str) -> String {
    format!(
        "CREATE SEQUENCE {prefix}_version;
         CREATE TABLE {prefix}_leases (
             grp text NOT NULL, partition bigint NOT NULL CHECK (partition >= 0), owner text,
             epoch bigint NOT NULL, state text NOT NULL, prohibited text[] NOT NULL DEFAULT '{{}}',
             load double precision, note text, written_at_unix_ms bigint,
             version bigint NOT NULL, PRIMARY KEY (grp, partition));
         CREATE TABLE {prefix}_members (
             grp text NOT NULL, node text COLLATE \"C\" NOT NULL, weight bigint NOT NULL,
             draining boolean NOT NULL, load double precision, heartbeat bigint NOT NULL,
             written_at_unix_ms bigint, version bigint NOT NULL, PRIMARY KEY (grp, node));
         CREATE FUNCTION {prefix}_lease_changed() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             IF TG_OP = 'DELETE' THEN
                 PERFORM pg_notify('{prefix}_changes', OLD.grp || ' lease ' || OLD.partition);
             ELSE
                 PERFORM pg_notify('{prefix}_changes', NEW.grp || ' lease ' || NEW.partition);
             END IF;
             RETURN NULL;
         END $$;
         CREATE FUNCTION {prefix}_member_changed() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             IF TG_OP = 'DELETE' THEN
                 PERFORM pg_notify('{prefix}_changes', OLD.grp || ' member ' || OLD.node);
             ELSE
                 PERFORM pg_notify('{prefix}_changes', NEW.grp || ' member ' || NEW.node);
             END IF;
             RETURN NULL;
         END $$;
         CREATE TRIGGER {prefix}_lease_changed
             AFTER INSERT OR UPDATE OR DELETE ON {prefix}_leases
             FOR EACH ROW EXECUTE FUNCTION {prefix}_lease_changed();
         CREATE TRIGGER {prefix}_member_changed
             AFTER INSERT OR UPDATE OR DELETE ON {prefix}_members
             FOR EACH ROW EXECUTE FUNCTION {prefix}_member_changed();
         CREATE TABLE {prefix}_schema (
             singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
             version integer NOT NULL);
         INSERT INTO {prefix}_schema (version) VALUES (1);
         INSERT INTO {prefix}_leases VALUES
             ('orders', 0, 'n1', 5, 'held', '{{}}', NULL, NULL, NULL, nextval('{prefix}_version'));
         INSERT INTO {prefix}_members VALUES
             ('orders', 'n1', 2, false, NULL, 17, 1700000000000, nextval('{prefix}_version'));"
    )
}

/// What a store connected to an upgraded version 1 layout does: reads the old rows, the
/// member publishing no timings, and writes a group record and a member's timings.
async fn use_upgraded_layout(store: PostgresStore) {
    let group = GroupName::new("orders").unwrap();
    let n1 = NodeId::new("n1").unwrap();
    let member = store.get_member(&group, &n1).await.unwrap().unwrap();
    let old = MemberRecord {
        weight: 2,
        heartbeat: 17,
        written_at_unix_ms: Some(1_700_000_000_000),
        ..MemberRecord::default()
    };
    assert_eq!(member.value.lease_validity, None);
    assert_eq!((&member.value, member.version.as_number()), (&old, Some(2)));
    let listed = store.list_members(&group).await.unwrap();
    assert_eq!((listed.records.len(), listed.corrupt.len()), (1, 0));
    let lease = store
        .get_lease(&group, PartitionId(0))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(lease.value.epoch, Epoch(5));

    assert!(store.get_group(&group).await.unwrap().is_none());
    let created = store
        .put_group(&group, &GroupRecord::default(), PutMode::Create)
        .await
        .expect("a group record in the upgraded layout");
    let timed = MemberRecord {
        lease_validity: Some(Duration::from_nanos(30_000_000_007)),
        acquire_after: Some(Duration::from_secs(45)),
        ..old
    };
    store
        .put_member(&group, &n1, &timed, PutMode::Update(member.version))
        .await
        .expect("rewrite the old member");
    let got = store.get_member(&group, &n1).await.unwrap().unwrap();
    assert_eq!(got.value, timed);
    assert!(
        created.as_number() > Some(2),
        "the sequence carries on: {created}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_store_upgrades_a_version_1_layout_in_place() {
    let Some(url) = common::url() else {
        return;
    };
    let prefix = format!("upgrade_test_{}", std::process::id());
    let client = common::raw_client(&url).await;
    client
        .batch_execute(&layout_v1(&prefix))
        .await
        .expect("create a version 1 layout");
    let options = common::test_options(&url).table_prefix(&prefix);
    let store = PostgresStore::connect(options).await;
    let version: i32 = client
        .query_one(&format!("SELECT version FROM {prefix}_schema"), &[])
        .await
        .unwrap()
        .get(0);
    // The checks run in a task of their own so that the layout is dropped even if one fails.
    let used = match store {
        Ok(store) => tokio::spawn(use_upgraded_layout(store)).await,
        Err(error) => {
            common::drop_layout(&client, &prefix).await;
            panic!("a version 1 layout is upgraded, not refused: {error}");
        }
    };
    common::drop_layout(&client, &prefix).await;
    assert_eq!(version, SCHEMA_VERSION);
    used.expect("the upgraded layout works");
}

/// The layout as version 3 left it, before previous owners, hand-offs, sessions and the members'
/// capacity, limits, address and metadata: version 1 with the notifications of version 2 and the group
/// table and timing columns of version 3, its lease and member of group `orders` (versions 1
/// and 2), and a member publishing its timings (version 3).
fn layout_v3(prefix: &str) -> String {
    let channel = format!("{prefix}_changes");
    format!(
        "{v1}
         CREATE OR REPLACE FUNCTION {prefix}_lease_changed() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             IF TG_OP = 'DELETE' THEN
                 PERFORM pg_notify('{channel}', OLD.grp || ' lease ' || OLD.partition);
             ELSE
                 PERFORM pg_notify('{channel}', NEW.grp || ' lease ' || NEW.partition || ' ' || NEW.state);
             END IF;
             RETURN NULL;
         END $$;
         CREATE OR REPLACE FUNCTION {prefix}_member_changed() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             IF TG_OP = 'DELETE' THEN
                 PERFORM pg_notify('{channel}', OLD.grp || ' member ' || OLD.node || ' delete');
             ELSE
                 PERFORM pg_notify('{channel}', NEW.grp || ' member ' || NEW.node || ' ' || lower(TG_OP));
             END IF;
             RETURN NULL;
         END $$;
         CREATE TABLE {prefix}_groups (
             grp text PRIMARY KEY, record text NOT NULL, version bigint NOT NULL);
         ALTER TABLE {prefix}_members
             ADD COLUMN lease_validity_ns bigint, ADD COLUMN acquire_after_ns bigint;
         UPDATE {prefix}_schema SET version = 3;
         INSERT INTO {prefix}_members VALUES
             ('orders', 'n2', 1, false, 0.5, 3, NULL, nextval('{prefix}_version'),
              30000000007, 45000000000);",
        v1 = layout_v1(prefix)
    )
}

/// What a store connected to a version 3 layout upgraded through versions 4 to 6 does:
/// reads the old rows with none of the new fields, keeps the new fields of a rewrite in
/// their own columns (a session as the bigint of the same bits), and still announces
/// writes.
async fn use_layout_upgraded_from_v3(
    store: PostgresStore,
    client: &tokio_postgres::Client,
    prefix: &str,
) {
    let group = GroupName::new("orders").unwrap();
    let (n1, n2) = (NodeId::new("n1").unwrap(), NodeId::new("n2").unwrap());
    let timed = store.get_member(&group, &n2).await.unwrap().unwrap();
    let old = MemberRecord {
        load: Some(0.5),
        heartbeat: 3,
        lease_validity: Some(Duration::from_nanos(30_000_000_007)),
        acquire_after: Some(Duration::from_secs(45)),
        ..MemberRecord::default()
    };
    assert_eq!((&timed.value, timed.version.as_number()), (&old, Some(3)));
    let lease = store
        .get_lease(&group, PartitionId(0))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (
            lease.value.epoch,
            lease.value.previous_owner.clone(),
            lease.value.handed_to.clone(),
            lease.value.session
        ),
        (Epoch(5), None, None, None)
    );
    assert_eq!(timed.value.session, None);

    let mut feed = store
        .watch(&group)
        .await
        .expect("watch the upgraded layout");
    let described = MemberRecord {
        capacity: Some(4.0),
        max_load: Some(0.75),
        max_partitions: Some(12),
        address: Some("http://10.0.0.7:8080".to_owned()),
        metadata: [("zone".to_owned(), "eu-1".to_owned())].into(),
        session: Some(u64::MAX - 6),
        ..old
    };
    store
        .put_member(&group, &n2, &described, PutMode::Update(timed.version))
        .await
        .expect("rewrite the old member with the new fields");
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(10), feed.next()).await,
        Ok(Some(Change::MemberUpdated(n2.clone()))),
        "the rewrite is announced"
    );
    let handed_on = LeaseRecord {
        owner: None,
        state: LeaseState::Released,
        previous_owner: Some(n1.clone()),
        handed_to: Some(n2.clone()),
        ..lease.value
    };
    store
        .put_lease(
            &group,
            PartitionId(0),
            &handed_on,
            PutMode::Update(lease.version),
        )
        .await
        .expect("release the old lease, handing it to another node");
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(10), feed.next()).await,
        Ok(Some(Change::LeaseWritten {
            partition: PartitionId(0),
            state: LeaseState::Released
        })),
        "the release is announced"
    );
    assert_eq!(
        store.get_member(&group, &n2).await.unwrap().unwrap().value,
        described
    );
    assert_eq!(
        store
            .get_lease(&group, PartitionId(0))
            .await
            .unwrap()
            .unwrap()
            .value,
        handed_on
    );
    let raw_sessions = || async {
        let row = client
            .query_one(
                &format!(
                    "SELECT m.session, l.session
                     FROM {prefix}_members m, {prefix}_leases l
                     WHERE m.grp = 'orders' AND m.node = 'n2' AND l.grp = 'orders'"
                ),
                &[],
            )
            .await
            .unwrap();
        let sessions: (Option<i64>, Option<i64>) = (row.get(0), row.get(1));
        sessions
    };
    let row = client
        .query_one(
            &format!(
                "SELECT m.metadata, m.max_partitions, l.previous_owner, l.handed_to
                 FROM {prefix}_members m, {prefix}_leases l
                 WHERE m.grp = 'orders' AND m.node = 'n2' AND l.grp = 'orders'"
            ),
            &[],
        )
        .await
        .unwrap();
    let columns: (Option<String>, Option<i64>, Option<String>, Option<String>) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    assert_eq!(
        columns,
        (
            Some(r#"{"zone":"eu-1"}"#.to_owned()),
            Some(12),
            Some("n1".to_owned()),
            Some("n2".to_owned())
        )
    );
    assert_eq!(raw_sessions().await, (Some(-7), None), "a released lease");

    let released = store
        .get_lease(&group, PartitionId(0))
        .await
        .unwrap()
        .unwrap();
    let taken = LeaseRecord {
        owner: Some(n2.clone()),
        epoch: handed_on.epoch.next(),
        state: LeaseState::Held,
        handed_to: None,
        session: described.session,
        ..handed_on
    };
    store
        .put_lease(
            &group,
            PartitionId(0),
            &taken,
            PutMode::Update(released.version),
        )
        .await
        .expect("take the lease in the member's session");
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(10), feed.next()).await,
        Ok(Some(Change::LeaseWritten {
            partition: PartitionId(0),
            state: LeaseState::Held
        })),
        "the take is announced"
    );
    assert_eq!(
        store
            .get_lease(&group, PartitionId(0))
            .await
            .unwrap()
            .unwrap()
            .value,
        taken
    );
    assert_eq!(raw_sessions().await, (Some(-7), Some(-7)), "a taken lease");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_store_upgrades_a_version_3_layout_in_place() {
    let Some(url) = common::url() else {
        return;
    };
    let prefix = format!("upgrade_v3_test_{}", std::process::id());
    let client = common::raw_client(&url).await;
    client
        .batch_execute(&layout_v3(&prefix))
        .await
        .expect("create a version 3 layout");
    let options = common::test_options(&url).table_prefix(&prefix);
    let store = PostgresStore::connect(options).await;
    let version: i32 = client
        .query_one(&format!("SELECT version FROM {prefix}_schema"), &[])
        .await
        .unwrap()
        .get(0);
    // The checks run in a task of their own so that the layout is dropped even if one fails.
    let used = match store {
        Ok(store) => {
            let (url, prefix) = (url.clone(), prefix.clone());
            tokio::spawn(async move {
                let client = common::raw_client(&url).await;
                use_layout_upgraded_from_v3(store, &client, &prefix).await
            })
            .await
        }
        Err(error) => {
            common::drop_layout(&client, &prefix).await;
            panic!("a version 3 layout is upgraded, not refused: {error}");
        }
    };
    common::drop_layout(&client, &prefix).await;
    assert_eq!(version, SCHEMA_VERSION);
    used.expect("the upgraded layout works");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_store_never_shows_the_password() {
    let Some(url) = common::url() else {
        return;
    };
    // The test server trusts every local connection, so any password is accepted.
    let with_password = url.replacen("postgres@", "postgres:hunter2@", 1);
    assert_ne!(with_password, url, "the test URL names user postgres");
    let store = PostgresStore::connect(common::test_options(&with_password))
        .await
        .expect("connect");
    let shown = format!("{store:?}");
    assert!(shown.contains("127.0.0.1"), "{shown}");
    assert!(!shown.contains("hunter2"), "{shown}");
}

#[tokio::test]
async fn postgres_store_refuses_an_unreadable_ca_file_before_connecting() {
    let url = "postgres://leases@127.0.0.1:1/app?sslmode=verify-full";
    let options = PostgresOptions::from_url(url)
        .unwrap()
        .ca_file("/nonexistent/leasehold-ca.pem");
    match PostgresStore::connect(options).await {
        Err(StoreError::Invalid(message)) => {
            assert!(message.contains("leasehold-ca.pem"), "{message}")
        }
        other => panic!("expected Invalid, got {other:?}"),
    }
}
