//! What `leasehold --version` says: the version, and the stores this build can open (which
//! depend on the features it was built with).

macro_rules! store_feature {
    ($name:ident, $feature:literal, $text:literal) => {
        #[cfg(feature = $feature)]
        macro_rules! $name {
            () => {
                $text
            };
        }
        #[cfg(not(feature = $feature))]
        macro_rules! $name {
            () => {
                ""
            };
        }
    };
}

store_feature!(postgres, "postgres", ", postgres");
store_feature!(etcd, "etcd", ", etcd");
store_feature!(zookeeper, "zookeeper", ", zk");
store_feature!(azure, "azure", ", azure");

/// `--version`'s text (`-V` prints the version alone).
pub const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    "\nstores: sqlite, memory",
    postgres!(),
    etcd!(),
    zookeeper!(),
    azure!(),
);
