//! Participants on Azure Table Storage (Azurite): takeover after a crash, and scans backing
//! off while the service throttles, with renewals on schedule, in groups that renew per
//! partition and by session.

mod common;

use std::sync::Arc;

use leasehold::testing::scenarios::{
    crash_takeover, crash_takeover_with_mode, throttled_scans, throttled_scans_with_mode,
};
use leasehold::testing::unique_group;
use leasehold::LeaseMode;
use leasehold_azure::AzureTableStore;

async fn store() -> Option<Arc<AzureTableStore>> {
    let options = common::azurite_options("leaseholdfleet")?;
    Some(Arc::new(
        AzureTableStore::connect(options)
            .await
            .expect("connect to Azurite"),
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn azure_participants_take_over_a_crashed_node_without_overlap() {
    let Some(store) = store().await else {
        return;
    };
    crash_takeover(store, unique_group("crash")).await;
}

/// Azurite cannot throttle, so listings are throttled by a wrapper around the real store,
/// answering as the service does under load; renewals still go to Azurite.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn azure_scans_back_off_when_throttled_while_renewals_keep_their_schedule() {
    let Some(store) = store().await else {
        return;
    };
    throttled_scans(store, unique_group("throttle")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn azure_sessions_take_over_a_crashed_node_without_overlap() {
    let Some(store) = store().await else {
        return;
    };
    crash_takeover_with_mode(store, unique_group("crash-session"), LeaseMode::Session).await;
}

/// Throttled as above; with sessions the renewals are member writes, which still go to
/// Azurite, and no lease record may be written meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn azure_sessions_renew_on_schedule_while_throttled_scans_back_off() {
    let Some(store) = store().await else {
        return;
    };
    throttled_scans_with_mode(store, unique_group("throttle-session"), LeaseMode::Session).await;
}
