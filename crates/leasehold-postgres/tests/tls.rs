//! TLS against the test server: verified connections work, unverifiable ones are refused.

mod common;

use std::error::Error;

use leasehold::testing::run_conformance;
use leasehold::StoreError;
use leasehold_postgres::PostgresStore;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_store_passes_the_conformance_suite_over_tls() {
    let Some((tls_url, ca, _)) = common::tls() else {
        return;
    };
    let plain_url = common::url().expect("checked by tls()");
    let options = common::conformance_options(&tls_url).ca_file(ca);
    let harness = common::PostgresHarness::with(options, &plain_url).await;
    // The server itself says whether the store's connection is encrypted.
    let encrypted: i64 = harness
        .client
        .query_one(
            "SELECT count(*) FROM pg_stat_ssl JOIN pg_stat_activity USING (pid) \
             WHERE ssl AND application_name = 'leasehold'",
            &[],
        )
        .await
        .expect("read pg_stat_ssl")
        .get(0);
    assert!(
        encrypted >= 1,
        "no encrypted leasehold connection on the server"
    );
    run_conformance(&harness).await;
}

#[tokio::test]
async fn postgres_store_refuses_a_server_its_ca_did_not_sign() {
    let Some((tls_url, _, other_ca)) = common::tls() else {
        return;
    };
    for ca_file in [Some(other_ca), None] {
        let options = match &ca_file {
            Some(ca) => common::test_options(&tls_url).ca_file(ca),
            None => common::test_options(&tls_url),
        };
        let error = PostgresStore::connect(options)
            .await
            .expect_err("a server outside the trusted roots is refused");
        let chain = chain(&error);
        assert!(
            matches!(error, StoreError::Unavailable { .. }),
            "{ca_file:?}: {chain}"
        );
        assert!(chain.contains("TLS"), "{ca_file:?}: {chain}");
        assert!(chain.contains("certificate"), "{ca_file:?}: {chain}");
    }
}

#[tokio::test]
async fn postgres_store_verifies_the_server_by_address_and_by_name() {
    let Some((tls_url, ca, _)) = common::tls() else {
        return;
    };
    // The certificate names 127.0.0.1 and localhost, so both verify.
    let verify_full = tls_url.replace("sslmode=require", "sslmode=verify-full");
    PostgresStore::connect(common::test_options(&verify_full).ca_file(&ca))
        .await
        .expect("verify-full against the right authority");
    let by_name = verify_full.replace("127.0.0.1", "localhost");
    PostgresStore::connect(common::test_options(&by_name).ca_file(&ca))
        .await
        .expect("the certificate also names localhost");
}

/// The error and all its sources, one after another.
fn chain(error: &StoreError) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
