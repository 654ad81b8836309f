//! The demo and the admin commands against each server store, reached by its URL. Each
//! server comes from the environment `scripts/test.sh` sets up; a missing one fails the test
//! (or skips it under `LEASEHOLD_SKIP_SERVICES=1`).

mod common;

use std::process::Command;

/// The store URL built from the environment; `None` when the test is to skip.
fn url_from_env(variable: &str, make: impl FnOnce(String) -> String) -> Option<String> {
    leasehold::testing::service_env(variable, "its store's server").map(make)
}

fn unique_group(kind: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("cli-{kind}-{}-{nanos}", std::process::id())
}

fn leasehold(store: &str, group: &str, args: &[&str], env: &[(&str, String)]) -> common::Run {
    let mut command = Command::new(env!("CARGO_BIN_EXE_leasehold"));
    command
        .args(["--store", store, "--group", group])
        .args(args);
    for (name, value) in env {
        command.env(name, value);
    }
    common::Run::from(command.output().expect("run leasehold"))
}

/// Runs the demo and a few admin commands on `store`.
fn exercise(kind: &str, store: &str, env: &[(&str, String)]) {
    let demo = leasehold(
        store,
        &unique_group(kind),
        &[
            "demo",
            "--nodes",
            "3",
            "--partitions",
            "12",
            "--heartbeat",
            "150ms",
            "--validity",
            "600ms",
            "--acquire-after",
            "1s",
        ],
        env,
    );
    assert_eq!(demo.code, 0, "demo on {kind}: {demo:?}");
    for needle in [
        "failover: ",
        "hand-off: ",
        "overlaps:              0",
        "result:                OK",
    ] {
        assert!(
            demo.stdout.contains(needle),
            "demo on {kind} lacks {needle:?}:\n{}",
            demo.stdout
        );
    }

    let group = unique_group(kind);
    let init = leasehold(store, &group, &["init", "--partitions", "4"], env);
    assert_eq!(init.code, 0, "init on {kind}: {init:?}");
    let status = leasehold(store, &group, &["status", "--json"], env);
    assert_eq!(status.code, 0, "status on {kind}: {status:?}");
    let json: serde_json::Value = serde_json::from_str(&status.stdout).expect("status JSON");
    assert_eq!(common::partitions(&json).len(), 4, "{json}");
    let offline = leasehold(store, &group, &["offline", "2"], env);
    assert_eq!(offline.code, 0, "offline on {kind}: {offline:?}");
    let destroy = leasehold(store, &group, &["destroy", "--yes"], env);
    assert_eq!(destroy.code, 0, "destroy on {kind}: {destroy:?}");
    // Four leases and the record `offline` rewrote to nudge settled nodes.
    assert!(
        destroy.stdout.contains("removed 5 records"),
        "destroy on {kind}: {destroy:?}"
    );
}

#[test]
fn postgres_url_runs_the_demo_and_admin_commands() {
    if let Some(url) = url_from_env("LEASEHOLD_TEST_POSTGRES_URL", |url| url) {
        exercise("postgres", &url, &[]);
    }
}

#[test]
#[cfg(feature = "etcd")]
fn etcd_url_runs_the_demo_and_admin_commands() {
    if let Some(url) = url_from_env("LEASEHOLD_TEST_ETCD_ENDPOINTS", |endpoints| {
        format!("etcd://{endpoints}/leasehold-cli")
    }) {
        exercise("etcd", &url, &[]);
    }
}

#[test]
fn zookeeper_url_runs_the_demo_and_admin_commands() {
    if let Some(url) = url_from_env("LEASEHOLD_TEST_ZOOKEEPER", |hosts| {
        format!("zk://{hosts}/leasehold-cli")
    }) {
        exercise("zookeeper", &url, &[]);
    }
}

#[test]
fn azure_url_runs_the_demo_and_admin_commands() {
    let Some(endpoint) = url_from_env("LEASEHOLD_TEST_AZURITE_ENDPOINT", |e| e) else {
        return;
    };
    let key = std::env::var("LEASEHOLD_TEST_AZURITE_KEY").expect("Azurite key with its endpoint");
    // http://HOST:PORT/ACCOUNT → azure+http://HOST:PORT/ACCOUNT/TABLE
    let url = format!("azure+{endpoint}/leaseholdcli");
    exercise("azure", &url, &[("LEASEHOLD_AZURE_KEY", key)]);
}

#[test]
fn azure_https_url_verifies_the_server_with_its_ca() {
    let Some(endpoint) = url_from_env("LEASEHOLD_TEST_AZURITE_TLS_ENDPOINT", |e| e) else {
        return;
    };
    let key = std::env::var("LEASEHOLD_TEST_AZURITE_KEY").expect("Azurite key with its endpoint");
    let ca = std::env::var("LEASEHOLD_TEST_AZURITE_CA").expect("the test CA with the server");
    let url = format!("azure+{endpoint}/leaseholdclitls");
    exercise(
        "azure-tls",
        &url,
        &[("LEASEHOLD_AZURE_KEY", key), ("LEASEHOLD_AZURE_CA", ca)],
    );
}

#[test]
fn postgres_url_over_tls_verifies_the_server_with_pgsslrootcert() {
    let Some(url) = url_from_env("LEASEHOLD_TEST_POSTGRES_URL", |url| {
        format!("{url}?sslmode=require")
    }) else {
        return;
    };
    let ca = std::env::var("LEASEHOLD_TEST_POSTGRES_CA").expect("the test CA with the server");
    exercise("postgres-tls", &url, &[("PGSSLROOTCERT", ca)]);
}

#[test]
#[cfg(feature = "etcd")]
fn etcd_https_url_verifies_the_server_with_its_ca() {
    let Some(url) = url_from_env("LEASEHOLD_TEST_ETCD_TLS_ENDPOINT", |endpoint| {
        format!("etcd+https://{endpoint}/leasehold-cli")
    }) else {
        return;
    };
    let ca = std::env::var("LEASEHOLD_TEST_ETCD_CA").expect("the test CA with the server");
    exercise("etcd-tls", &url, &[("LEASEHOLD_ETCD_CA", ca)]);
}

#[test]
#[cfg(feature = "etcd")]
fn etcd_https_url_presents_a_client_certificate_when_the_server_demands_one() {
    let Some(url) = url_from_env("LEASEHOLD_TEST_ETCD_MTLS_ENDPOINT", |endpoint| {
        format!("etcd+https://{endpoint}/leasehold-cli")
    }) else {
        return;
    };
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} with the server"));
    exercise(
        "etcd-mtls",
        &url,
        &[
            ("LEASEHOLD_ETCD_CA", var("LEASEHOLD_TEST_ETCD_CA")),
            ("LEASEHOLD_ETCD_CERT", var("LEASEHOLD_TEST_CLIENT_CERT")),
            ("LEASEHOLD_ETCD_KEY", var("LEASEHOLD_TEST_CLIENT_KEY")),
        ],
    );
}
