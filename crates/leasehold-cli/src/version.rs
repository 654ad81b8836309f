//! What `leasehold --version` says: the version, the commit it was built from, and the
//! stores this build can open (which depend on the features it was built with).

/// `--version`'s text (`-V` prints the version alone).
pub fn long_version() -> String {
    let optional = [
        ("postgres", cfg!(feature = "postgres")),
        ("etcd", cfg!(feature = "etcd")),
        ("zk", cfg!(feature = "zookeeper")),
        ("azure", cfg!(feature = "azure")),
    ];
    let mut stores = vec!["sqlite", "memory"];
    stores.extend(
        optional
            .iter()
            .filter_map(|&(name, built)| built.then_some(name)),
    );
    format!(
        "{}\ncommit: {}\nstores: {}",
        env!("CARGO_PKG_VERSION"),
        env!("LEASEHOLD_COMMIT"),
        stores.join(", ")
    )
}
