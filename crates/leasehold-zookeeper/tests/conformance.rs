//! The store conformance suite against a real ZooKeeper server.

mod common;

use std::sync::Arc;

use async_trait::async_trait;
use leasehold::testing::{
    malformed_json_values, run_conformance, run_transaction_conformance, Harness, Listed,
    Malformed, CONFORMANCE_CALL_TIMEOUT, MALFORMED_FIRST_PARTITION,
};
use leasehold::{GroupName, LeaseStore, PartitionId, RecordKey, StoreError};
use leasehold_zookeeper::ZookeeperStore;
use zookeeper_client::{Acls, CreateMode};

struct ZookeeperHarness {
    store: ZookeeperStore,
    /// A plain client, for znodes the store would never write.
    client: zookeeper_client::Client,
}

#[async_trait]
impl Harness for ZookeeperHarness {
    fn store(&self) -> Arc<dyn LeaseStore> {
        Arc::new(self.store.clone())
    }

    async fn corrupt_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
    ) -> Result<(), StoreError> {
        let path = self.store.lease_path(group, partition);
        self.store
            .overwrite_unconditionally(&path, b"\xff not json")
            .await
    }

    async fn corrupt_group(&self, group: &GroupName) -> Result<(), StoreError> {
        let path = self.store.group_record_path(group);
        self.store
            .overwrite_unconditionally(&path, b"{not json")
            .await
    }

    /// Data any ZooKeeper client could set, and znodes in the group's directories whose names
    /// are no partition or node. (ZooKeeper paths are always UTF-8.)
    async fn write_malformed(&self, group: &GroupName) -> Result<Vec<Malformed>, StoreError> {
        let first = self
            .store
            .lease_path(group, PartitionId(MALFORMED_FIRST_PARTITION));
        let leases = &first[..first.rfind('/').expect("a lease path has a directory")];
        let members = format!("{}/member", &leases[..leases.rfind('/').expect("a group")]);
        let mut writes = Vec::new();
        for (damage, value) in malformed_json_values() {
            let path = match &damage.key {
                RecordKey::Lease(partition) => self.store.lease_path(group, *partition),
                RecordKey::Member(node) => format!("{members}/{node}"),
                other => panic!("not a record key: {other}"),
            };
            writes.push((path, value, damage));
        }
        let released = br#"{"owner":null,"epoch":0,"state":"released"}"#.to_vec();
        for (directory, name, listed, damage) in [
            (
                leases,
                "4294967296",
                Listed::Leases,
                "a partition beyond u32",
            ),
            (
                leases,
                "abcdefghij",
                Listed::Leases,
                "a partition that is not a number",
            ),
            (
                leases,
                "12",
                Listed::Leases,
                "a partition without its padding",
            ),
            (&members, "bad name", Listed::Members, "not a node name"),
        ] {
            let kind = if listed == Listed::Leases {
                "lease"
            } else {
                "member"
            };
            let shown = RecordKey::Stored(format!("{kind} {name}"));
            writes.push((
                format!("{directory}/{name}"),
                released.clone(),
                Malformed::new(listed, shown, damage),
            ));
        }
        let options = CreateMode::Persistent.with_acls(Acls::anyone_all());
        let mut malformed = Vec::new();
        for (path, value, damage) in writes {
            self.client
                .create(&path, &value, &options)
                .await
                .map_err(|e| StoreError::unavailable("write a malformed znode", e))?;
            malformed.push(damage);
        }
        Ok(malformed)
    }
}

impl ZookeeperHarness {
    async fn connect(address: &str) -> ZookeeperHarness {
        ZookeeperHarness {
            store: ZookeeperStore::connect(
                common::test_options(address).call_timeout(CONFORMANCE_CALL_TIMEOUT),
            )
            .await
            .expect("connect to the test ZooKeeper server"),
            client: zookeeper_client::Client::connector()
                .connect(address)
                .await
                .expect("a plain client"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn zookeeper_store_passes_the_conformance_suite() {
    let Some(address) = common::zookeeper_address() else {
        return;
    };
    run_conformance(&ZookeeperHarness::connect(&address).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn zookeeper_store_passes_the_transaction_conformance_suite() {
    let Some(address) = common::zookeeper_address() else {
        return;
    };
    run_transaction_conformance(&ZookeeperHarness::connect(&address).await).await;
}
