//! Finding the ZooKeeper server the tests run against.

#![allow(dead_code)]

use std::time::Duration;

use leasehold_zookeeper::{ZookeeperOptions, ZookeeperStore};

/// The connect string in `LEASEHOLD_TEST_ZOOKEEPER`, or `None` after printing why the test is
/// skipped. With `LEASEHOLD_REQUIRE_SERVICES=1` a missing server fails the test instead.
pub fn zookeeper_address() -> Option<String> {
    required_env("LEASEHOLD_TEST_ZOOKEEPER")
}

/// The folder holding `zookeeper.start` and `zookeeper.stop`, from
/// `LEASEHOLD_TEST_ZOOKEEPER_CTL`, with the same skip rules.
pub fn zookeeper_control() -> Option<String> {
    required_env("LEASEHOLD_TEST_ZOOKEEPER_CTL")
}

fn required_env(name: &str) -> Option<String> {
    match std::env::var(name) {
        Ok(value) if !value.is_empty() => Some(value),
        _ => {
            assert!(
                std::env::var("LEASEHOLD_REQUIRE_SERVICES").as_deref() != Ok("1"),
                "{name} is not set but LEASEHOLD_REQUIRE_SERVICES=1 requires the server"
            );
            println!("skipped: no ZooKeeper server (set {name} or run scripts/test.sh)");
            None
        }
    }
}

/// Options for the server at `address`, under the tests' own prefix, with short timeouts so
/// failures show quickly.
pub fn test_options(address: &str) -> ZookeeperOptions {
    ZookeeperOptions::new(address.split(','))
        .prefix("/leasehold-test")
        .session_timeout(Duration::from_secs(6))
        .call_timeout(Duration::from_secs(3))
}

/// A store under the tests' own prefix.
pub async fn connect(address: &str) -> ZookeeperStore {
    ZookeeperStore::connect(test_options(address))
        .await
        .expect("connect to the test ZooKeeper server")
}
