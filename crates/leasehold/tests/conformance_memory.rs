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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store_sessions_survive_a_crash_with_takeover() {
    let store = std::sync::Arc::new(leasehold::MemoryStore::new());
    leasehold::testing::scenarios::crash_takeover_with_mode(
        store,
        leasehold::testing::unique_group("crash-session"),
        leasehold::LeaseMode::Session,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store_sessions_release_is_taken_at_once_with_notifications() {
    let store = std::sync::Arc::new(leasehold::MemoryStore::new());
    leasehold::testing::scenarios::release_latency_with_mode(
        store,
        leasehold::testing::unique_group("release-session"),
        leasehold::LeaseMode::Session,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store_sessions_renew_while_scans_back_off_under_throttling() {
    let store = std::sync::Arc::new(leasehold::MemoryStore::new());
    leasehold::testing::scenarios::throttled_scans_with_mode(
        store,
        leasehold::testing::unique_group("throttle-session"),
        leasehold::LeaseMode::Session,
    )
    .await;
}

/// The store hangs, as an unreachable server would, for longer than the lease validity. In
/// session mode each node then finds records still naming it, which its session would keep
/// alive for ever unless it releases them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_store_sessions_hold_everything_again_after_an_outage() {
    let store = std::sync::Arc::new(leasehold::MemoryStore::new());
    let faulty = std::sync::Arc::new(leasehold::testing::FaultyStore::new(store));
    leasehold::testing::scenarios::store_outage_with_mode(
        faulty.clone(),
        leasehold::testing::unique_group("outage-session"),
        leasehold::LeaseMode::Session,
        async { faulty.set_hung(true) },
        async { faulty.set_hung(false) },
    )
    .await;
}
