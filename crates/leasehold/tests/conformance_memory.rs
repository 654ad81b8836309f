//! The store conformance suite against the in-memory store.

use leasehold::testing::{run_conformance, MemoryHarness};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_store_passes_the_conformance_suite() {
    run_conformance(&MemoryHarness::default()).await;
}
