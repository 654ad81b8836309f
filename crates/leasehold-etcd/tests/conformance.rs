//! The store conformance suite against the 3-member test cluster.

mod common;

use leasehold::testing::{run_conformance, run_transaction_conformance};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn etcd_store_passes_the_conformance_suite() {
    let Some(endpoints) = common::endpoints() else {
        return;
    };
    assert_eq!(
        endpoints.len(),
        3,
        "the suite runs against a 3-member cluster"
    );
    run_conformance(&common::EtcdHarness::new(&endpoints).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn etcd_store_passes_the_transaction_conformance_suite() {
    let Some(endpoints) = common::endpoints() else {
        return;
    };
    run_transaction_conformance(&common::EtcdHarness::new(&endpoints).await).await;
}
