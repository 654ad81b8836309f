//! The store conformance suite against the in-memory store.

use leasehold::testing::{run_conformance, MemoryHarness};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_store_passes_the_conformance_suite() {
    run_conformance(&MemoryHarness::default()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store_survives_a_crash_with_takeover() {
    let store = std::sync::Arc::new(leasehold::MemoryStore::new());
    leasehold::testing::scenarios::crash_takeover(store, leasehold::testing::unique_group("crash"))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store_release_is_taken_at_once_with_notifications() {
    let store = std::sync::Arc::new(leasehold::MemoryStore::new());
    leasehold::testing::scenarios::release_latency(
        store,
        leasehold::testing::unique_group("release"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store_scans_back_off_under_throttling_while_renewals_continue() {
    let store = std::sync::Arc::new(leasehold::MemoryStore::new());
    leasehold::testing::scenarios::throttled_scans(
        store,
        leasehold::testing::unique_group("throttle"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_store_transactions_conform() {
    leasehold::testing::run_transaction_conformance(&MemoryHarness::default()).await;
}
