//! The store conformance suite, for backend crates' tests (feature `testing`).
//!
//! A backend implements [`Harness`] and calls [`run_conformance`] from one test; every check
//! is also a public function, so a failing one can be run alone. Each check works in a group
//! of its own with a unique name, so one store (one server) serves the whole suite and runs
//! never see each other's records.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use leasehold::testing::{run_conformance, MemoryHarness};
//! run_conformance(&MemoryHarness::default()).await;
//! # });
//! ```

mod checks;
mod corrupt_checks;
mod delete_checks;
mod faulty;
mod field_checks;
mod group_checks;
mod hint_checks;
mod race_checks;
mod read_checks;
pub mod scenarios;
mod services;
mod txn_checks;
mod urls;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;

use crate::error::StoreError;
use crate::memory::MemoryStore;
use crate::record::{LeaseRecord, MemberRecord};
use crate::store::{LeaseStore, PutMode};
use crate::types::RecordKey;
use crate::types::{GroupName, NodeId, PartitionId};

pub use checks::*;
pub use corrupt_checks::*;
pub use delete_checks::*;
pub use faulty::FaultyStore;
pub use field_checks::*;
pub use group_checks::*;
pub use hint_checks::*;
pub use race_checks::*;
pub use read_checks::*;
pub use services::{require_tool, service_env, skipped, SKIP_VARIABLE};
pub use txn_checks::*;
pub use urls::assert_urls_refused;

/// What the suite needs from a backend under test.
#[async_trait]
pub trait Harness: Send + Sync {
    /// The store under test. Called once per check; may return the same store each time.
    fn store(&self) -> Arc<dyn LeaseStore>;

    /// Makes the record of `partition` in `group` undecodable, as damage or a hand edit would
    /// (for example invalid JSON, or an unknown state in a column). The record must exist.
    async fn corrupt_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
    ) -> Result<(), StoreError>;

    /// Makes the group record of `group` undecodable (text that is not JSON), as a hand edit
    /// would. The record must exist.
    async fn corrupt_group(&self, group: &GroupName) -> Result<(), StoreError>;

    /// Writes records into `group` in the backend's own raw format, each damaged the way a
    /// hand edit, another program or a failing disk could leave it (NULLs, wrong types, numbers
    /// out of range, text that is not JSON or not UTF-8, keys that name no partition), and
    /// says under which key the store must report each one.
    ///
    /// The check owns partitions below [`MALFORMED_FIRST_PARTITION`] and members whose names
    /// start with `good-`; the damaged records must use other keys.
    async fn write_malformed(&self, group: &GroupName) -> Result<Vec<Malformed>, StoreError>;
}

/// The first partition a [`Harness::write_malformed`] may damage; lower ones hold the good
/// records that must keep listing.
pub const MALFORMED_FIRST_PARTITION: u32 = 10;

/// The call timeout a store under the suite should have: long. The checks count every
/// write (the race of concurrent writers, for one), and a call that timed out leaves an
/// outcome they cannot count, so a timeout fails them; on a loaded machine a call can take
/// seconds. Tests that stop servers keep short timeouts of their own.
pub const CONFORMANCE_CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Which listing a malformed record shows up in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listed {
    /// [`LeaseStore::list_leases`].
    Leases,
    /// [`LeaseStore::list_members`].
    Members,
}

/// One record written by [`Harness::write_malformed`]: where it lists, the key its
/// [`StoreError::Corrupt`] must name, and what is wrong with it, for failure messages.
///
/// ```
/// use leasehold::testing::{Listed, Malformed};
/// use leasehold::{PartitionId, RecordKey};
/// let damage = Malformed::new(Listed::Leases, RecordKey::Lease(PartitionId(10)), "epoch is -1");
/// assert_eq!(damage.to_string(), "lease 10 (epoch is -1)");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed {
    /// The listing the record belongs to.
    pub listed: Listed,
    /// The key the store must report the record under.
    pub key: RecordKey,
    /// The damage, in words.
    pub damage: String,
}

impl Malformed {
    /// A malformed record listed in `listed`, to be reported under `key`.
    pub fn new(listed: Listed, key: RecordKey, damage: impl Into<String>) -> Malformed {
        Malformed {
            listed,
            key,
            damage: damage.into(),
        }
    }

    /// A malformed lease record of `partition`.
    pub fn lease(partition: u32, damage: impl Into<String>) -> Malformed {
        Malformed::new(
            Listed::Leases,
            RecordKey::Lease(PartitionId(partition)),
            damage,
        )
    }
}

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.key, self.damage)
    }
}

/// Damaged values for backends that keep each record as one JSON value (see
/// [`crate::codec`]), each with the record it must be written as: [`RecordKey::Lease`] or
/// [`RecordKey::Member`]. A harness writes each at its record's key and adds damage to the
/// keys themselves.
///
/// ```
/// let damage = leasehold::testing::malformed_json_values();
/// assert!(damage.iter().any(|(_, bytes)| std::str::from_utf8(bytes).is_err()));
/// ```
pub fn malformed_json_values() -> Vec<(Malformed, Vec<u8>)> {
    let lease_values: [(&str, &[u8]); 11] = [
        ("not JSON", b"{not json"),
        ("not UTF-8", b"\xff\xfe{}"),
        ("JSON of another shape", b"[1, 2]"),
        ("JSON null", b"null"),
        (
            "a negative epoch",
            br#"{"owner":null,"epoch":-1,"state":"held"}"#,
        ),
        (
            "a null in prohibited",
            br#"{"owner":"n1","epoch":1,"state":"held","prohibited":[null]}"#,
        ),
        (
            "an empty owner",
            br#"{"owner":"","epoch":1,"state":"held"}"#,
        ),
        (
            "an unknown state",
            br#"{"owner":null,"epoch":1,"state":"bogus"}"#,
        ),
        (
            "an empty previous owner",
            br#"{"owner":null,"epoch":1,"state":"released","previous_owner":""}"#,
        ),
        (
            "a number as the node handed to",
            br#"{"owner":null,"epoch":1,"state":"released","handed_to":7}"#,
        ),
        (
            "a negative session",
            br#"{"owner":"n1","epoch":1,"state":"held","session":-7}"#,
        ),
    ];
    let member_values: [(&str, &str, &[u8]); 8] = [
        (
            "bad-weight",
            "a weight beyond u32",
            br#"{"weight":4294967296}"#,
        ),
        (
            "bad-heartbeat",
            "a negative heartbeat",
            br#"{"weight":1,"heartbeat":-1}"#,
        ),
        (
            "bad-draining",
            "text as a flag",
            br#"{"weight":1,"draining":"yes"}"#,
        ),
        (
            "bad-capacity",
            "text as the capacity",
            br#"{"weight":1,"capacity":"lots"}"#,
        ),
        (
            "bad-cap",
            "a negative partition cap",
            br#"{"weight":1,"max_partitions":-1}"#,
        ),
        (
            "bad-metadata",
            "a number as a metadata value",
            br#"{"weight":1,"metadata":{"zone":1}}"#,
        ),
        (
            "bad-address",
            "a list as the address",
            br#"{"weight":1,"address":["http://a"]}"#,
        ),
        (
            "bad-session",
            "a session beyond u64",
            br#"{"weight":1,"session":18446744073709551616}"#,
        ),
    ];
    let leases = (MALFORMED_FIRST_PARTITION..)
        .zip(lease_values)
        .map(|(partition, (damage, bytes))| (Malformed::lease(partition, damage), bytes.to_vec()));
    let members = member_values.into_iter().map(|(name, damage, bytes)| {
        let node = NodeId::new(name).expect("a valid node name");
        (
            Malformed::new(Listed::Members, RecordKey::Member(node), damage),
            bytes.to_vec(),
        )
    });
    leases.chain(members).collect()
}

/// The [`Harness`] for [`MemoryStore`].
#[derive(Debug, Default)]
pub struct MemoryHarness {
    store: MemoryStore,
}

#[async_trait]
impl Harness for MemoryHarness {
    fn store(&self) -> Arc<dyn LeaseStore> {
        Arc::new(self.store.clone())
    }

    async fn corrupt_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
    ) -> Result<(), StoreError> {
        self.store.corrupt_lease(group, partition);
        Ok(())
    }

    async fn corrupt_group(&self, group: &GroupName) -> Result<(), StoreError> {
        self.store.corrupt_group(group);
        Ok(())
    }

    /// The memory store keeps decoded records, so the one damage it can hold is a record
    /// that does not decode at all: one lease and one member record of that kind.
    async fn write_malformed(&self, group: &GroupName) -> Result<Vec<Malformed>, StoreError> {
        let partition = PartitionId(MALFORMED_FIRST_PARTITION);
        self.store
            .put_lease(group, partition, &LeaseRecord::released(), PutMode::Create)
            .await?;
        self.store.corrupt_lease(group, partition);
        let node = NodeId::new("bad-member").expect("a valid name");
        self.store
            .put_member(group, &node, &MemberRecord::default(), PutMode::Create)
            .await?;
        self.store.corrupt_member(group, &node);
        Ok(vec![
            Malformed::lease(partition.0, "undecodable"),
            Malformed::new(Listed::Members, RecordKey::Member(node), "undecodable"),
        ])
    }
}

/// Deletes the lease record of `partition` and creates it again released at epoch 0, as a
/// hand edit of the store behind leasehold's back would: for tests of what notices the
/// epoch going back. The record must exist.
pub async fn recreate_by_hand(
    store: &dyn LeaseStore,
    group: &GroupName,
    partition: PartitionId,
) -> Result<(), StoreError> {
    let current = store
        .get_lease(group, partition)
        .await?
        .ok_or_else(|| StoreError::NotFound {
            key: RecordKey::Lease(partition),
        })?;
    store
        .delete_lease(group, partition, &current.version)
        .await?;
    store
        .put_lease(group, partition, &LeaseRecord::released(), PutMode::Create)
        .await?;
    Ok(())
}

/// A group name no other run of the suite uses: `<prefix>-<process>-<time>-<counter>`.
pub fn unique_group(prefix: &str) -> GroupName {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let name = format!(
        "{prefix}-{}-{nanos}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    GroupName::new(name).expect("prefix is a valid group name")
}

/// Runs every check of the suite against the harness's store, printing each check's name
/// as it passes. Panics with the check's name and what failed on the first failure.
pub async fn run_conformance(harness: &dyn Harness) {
    let store = harness.store();
    let name = format!("{store:?}");
    let name = name.split(['(', ' ', '{']).next().unwrap_or("store");
    macro_rules! check {
        ($check:ident $(, $arg:expr)*) => {{
            $check($($arg),*).await;
            println!("conformance[{name}]: {} ... ok", stringify!($check));
        }};
    }
    check!(create_get_and_ordered_list, harness.store());
    check!(update_if_version, harness.store());
    check!(stale_write_rejected, harness.store());
    check!(delete_then_recreate_gets_new_version, harness.store());
    check!(groups_are_isolated, harness.store());
    check!(members_round_trip, harness.store());
    check!(optional_fields_round_trip, harness.store());
    check!(sessions_round_trip, harness.store());
    check!(oversize_member_fields_are_refused, harness.store());
    check!(group_record_compare_and_set, harness.store());
    check!(damaged_group_record_is_reported_apart, harness);
    check!(epochs_never_go_back, harness.store());
    check!(batch_write_reports_each_result, harness.store());
    check!(batch_delete_reports_each_result, harness.store());
    check!(long_listings_are_complete, harness.store());
    check!(corrupt_record_is_reported_alone, harness);
    check!(batched_reads_answer_as_gets_do, harness.store());
    check!(malformed_records_are_reported_not_fatal, harness);
    check!(change_hints_name_what_changed, harness.store());
    check!(concurrent_increments_race, harness.store(), 8, 50);
    println!("conformance[{name}]: all checks passed");
}

/// Runs the checks of multi-record transactions ([`LeaseStore::transact`]), which session
/// leases need, against `harness`'s store.
pub async fn run_transaction_conformance(harness: &dyn Harness) {
    let store = harness.store();
    let name = format!("{store:?}");
    let name = name.split(['(', ' ', '{']).next().unwrap_or("store");
    transaction_writes_all_or_nothing(harness.store()).await;
    println!("conformance[{name}]: transaction_writes_all_or_nothing ... ok");
    transaction_gives_each_hint(harness.store()).await;
    println!("conformance[{name}]: transaction_gives_each_hint ... ok");
    sessions_round_trip_in_transactions(harness.store()).await;
    println!("conformance[{name}]: sessions_round_trip_in_transactions ... ok");
    transactions_race_single_writes(harness.store(), 4, 25).await;
    println!("conformance[{name}]: transactions_race_single_writes ... ok");
}
