//! TLS against the test member that serves only TLS: verified connections work, others fail.

mod common;

use std::error::Error;

use leasehold::testing::{run_conformance, unique_group};
use leasehold::{LeaseStore, StoreError};
use leasehold_etcd::{EtcdOptions, EtcdStore};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn etcd_store_passes_the_conformance_suite_over_tls() {
    let Some((endpoint, ca, _)) = common::tls() else {
        return;
    };
    run_conformance(&common::EtcdHarness::over_tls(&endpoint, &ca).await).await;
}

#[tokio::test]
async fn etcd_store_accepts_an_https_endpoint_with_its_ca() {
    let Some((endpoint, ca, _)) = common::tls() else {
        return;
    };
    let url = format!("etcd+https://{endpoint}/leasehold-tls");
    let options = EtcdOptions::from_url(&url).expect("URL").ca_file(ca);
    let store = EtcdStore::connect(options).await.expect("connect");
    let group = unique_group("https");
    let listing = store.list_leases(&group).await.expect("list over https");
    assert!(listing.records.is_empty());
}

#[tokio::test]
async fn etcd_store_refuses_a_server_its_ca_did_not_sign() {
    let Some((endpoint, _, other_ca)) = common::tls() else {
        return;
    };
    // The unrelated authority, and the Mozilla roots (no CA file).
    for ca_file in [Some(other_ca), None] {
        let endpoints = [endpoint.clone()];
        let options = common::test_options(&endpoints)
            .prefix("/leasehold-tls")
            .tls(true);
        let options = match &ca_file {
            Some(ca) => options.ca_file(ca),
            None => options,
        };
        let group = unique_group("refused");
        // Connecting may be deferred to the first call; either must fail.
        let error = match EtcdStore::connect(options).await {
            Err(error) => error,
            Ok(store) => store
                .list_leases(&group)
                .await
                .expect_err("a server outside the trusted roots is refused"),
        };
        let chain = chain(&error);
        assert!(
            matches!(error, StoreError::Unavailable { .. }),
            "{ca_file:?}: {chain}"
        );
        assert!(chain.contains("certificate"), "{ca_file:?}: {chain}");
    }
}

#[tokio::test]
async fn a_client_certificate_opens_a_server_that_demands_one() {
    let Some((endpoint, ca, identity)) = common::mtls() else {
        return;
    };
    let group = unique_group("mtls");
    let endpoints = [endpoint];
    let without = common::test_options(&endpoints)
        .prefix("/leasehold-mtls")
        .tls(true)
        .ca_file(&ca);
    let (certificate, key) = identity;
    let with = without.clone().client_certificate(certificate, key);
    let store = EtcdStore::connect(with)
        .await
        .expect("connect with a client certificate");
    leasehold::admin::init(&store, &group, 1)
        .await
        .expect("write with a client certificate");
    let listing = store.list_leases(&group).await.expect("list");
    assert_eq!(listing.records.len(), 1);

    // Without one, the server ends the handshake: connecting or the first call fails.
    let error = match EtcdStore::connect(without).await {
        Err(error) => error,
        Ok(store) => store
            .list_leases(&group)
            .await
            .expect_err("a client without a certificate is refused"),
    };
    assert!(
        matches!(error, StoreError::Unavailable { .. }),
        "{}",
        chain(&error)
    );
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
