//! Finding the ZooKeeper server the tests run against.

#![allow(dead_code)]

use std::time::Duration;

use leasehold::testing::service_env;
use leasehold_zookeeper::{ZookeeperOptions, ZookeeperStore};

/// The connect string in `LEASEHOLD_TEST_ZOOKEEPER`; `None` when the test is to skip
/// ([`service_env`]).
pub fn zookeeper_address() -> Option<String> {
    required_env("LEASEHOLD_TEST_ZOOKEEPER")
}

/// The folder holding `zookeeper.start` and `zookeeper.stop`, from
/// `LEASEHOLD_TEST_ZOOKEEPER_CTL`, with the same rules.
pub fn zookeeper_control() -> Option<String> {
    required_env("LEASEHOLD_TEST_ZOOKEEPER_CTL")
}

fn required_env(name: &str) -> Option<String> {
    service_env(name, "the ZooKeeper server")
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
