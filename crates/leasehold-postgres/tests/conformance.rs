//! The store conformance suite against the test server.

mod common;

use leasehold::testing::{run_conformance, run_transaction_conformance};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_store_passes_the_conformance_suite() {
    let Some(url) = common::url() else {
        return;
    };
    run_conformance(&common::PostgresHarness::new(&url).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_store_passes_the_transaction_checks() {
    let Some(url) = common::url() else {
        return;
    };
    run_transaction_conformance(&common::PostgresHarness::new(&url).await).await;
}
