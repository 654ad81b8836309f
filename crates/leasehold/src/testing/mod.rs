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
mod faulty;
pub mod scenarios;
mod urls;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;

use crate::error::StoreError;
use crate::memory::MemoryStore;
use crate::store::LeaseStore;
use crate::types::{GroupName, PartitionId};

pub use checks::*;
pub use faulty::FaultyStore;
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
    check!(batch_write_reports_each_result, harness.store());
    check!(corrupt_record_is_reported_alone, harness);
    check!(change_hints_name_what_changed, harness.store());
    check!(concurrent_increments_race, harness.store(), 8, 50);
    println!("conformance[{name}]: all checks passed");
}
