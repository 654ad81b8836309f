//! What the integration tests share: finding the test cluster, and a harness for the suite.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{Certificate, Client, ConnectOptions, TlsOptions};
use leasehold::testing::{
    malformed_json_values, service_env, unique_group, Harness, Listed, Malformed,
    CONFORMANCE_CALL_TIMEOUT,
};
use leasehold::{GroupName, LeaseStore, PartitionId, RecordKey, StoreError};
use leasehold_etcd::{EtcdOptions, EtcdStore, MAX_TXN_OPS};

const ENDPOINTS_VAR: &str = "LEASEHOLD_TEST_ETCD_ENDPOINTS";
const TLS_ENDPOINT_VAR: &str = "LEASEHOLD_TEST_ETCD_TLS_ENDPOINT";
const CA_VAR: &str = "LEASEHOLD_TEST_ETCD_CA";
const OTHER_CA_VAR: &str = "LEASEHOLD_TEST_OTHER_CA";

/// The TLS test member: its endpoint, the authority that signed its certificate, and one that
/// did not; `None` when the test is to skip ([`service_env`]).
pub fn tls() -> Option<(String, PathBuf, PathBuf)> {
    let endpoint = service_env(TLS_ENDPOINT_VAR, "the etcd TLS member")?;
    let ca = service_env(CA_VAR, "the etcd TLS authority")?;
    let other = service_env(OTHER_CA_VAR, "a second TLS authority")?;
    Some((endpoint, PathBuf::from(ca), PathBuf::from(other)))
}

/// The member that demands a client certificate: its endpoint, the authority that signed
/// both certificates, and the client's certificate and key; `None` when the test is to skip
/// ([`service_env`]).
pub fn mtls() -> Option<(String, PathBuf, (PathBuf, PathBuf))> {
    let server = "the etcd member that demands a client certificate";
    let endpoint = service_env("LEASEHOLD_TEST_ETCD_MTLS_ENDPOINT", server)?;
    let ca = service_env(CA_VAR, server)?;
    let certificate = service_env("LEASEHOLD_TEST_CLIENT_CERT", server)?;
    let key = service_env("LEASEHOLD_TEST_CLIENT_KEY", server)?;
    Some((
        endpoint,
        PathBuf::from(ca),
        (PathBuf::from(certificate), PathBuf::from(key)),
    ))
}

/// The test cluster's endpoints; `None` when the test is to skip ([`service_env`]).
pub fn endpoints() -> Option<Vec<String>> {
    let list = service_env(ENDPOINTS_VAR, "the etcd cluster")?;
    Some(list.split(',').map(|e| e.trim().to_owned()).collect())
}

/// The request timeout of [`test_options`].
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);

/// Options for `endpoints` with timeouts short enough for tests that take members down.
pub fn test_options(endpoints: &[String]) -> EtcdOptions {
    EtcdOptions::new(endpoints)
        .request_timeout(REQUEST_TIMEOUT)
        .connect_timeout(Duration::from_secs(1))
}

/// Options for the conformance suite, which takes no member down.
pub fn conformance_options(endpoints: &[String]) -> EtcdOptions {
    test_options(endpoints).request_timeout(CONFORMANCE_CALL_TIMEOUT)
}

/// A store under a prefix of its own, so test runs never see each other's keys.
pub async fn store(endpoints: &[String]) -> EtcdStore {
    let prefix = format!("/leasehold-test/{}", unique_group("run"));
    EtcdStore::connect(test_options(endpoints).prefix(prefix))
        .await
        .expect("connect to the test cluster")
}

/// The conformance harness: corrupts a record by writing bytes that are not JSON at its key.
pub struct EtcdHarness {
    pub store: EtcdStore,
    pub client: Client,
    pub prefix: String,
}

impl EtcdHarness {
    /// A harness on the TLS member at `endpoint`, trusting the authority in `ca`.
    pub async fn over_tls(endpoint: &str, ca: &PathBuf) -> EtcdHarness {
        let prefix = format!("/leasehold-test/{}", unique_group("tls-suite"));
        let endpoints = [endpoint.to_owned()];
        let options = conformance_options(&endpoints)
            .prefix(&prefix)
            .tls(true)
            .ca_file(ca);
        let store = EtcdStore::connect(options)
            .await
            .expect("connect to the TLS member");
        let pem = std::fs::read(ca).expect("read the CA file");
        let tls = TlsOptions::new().ca_certificate(Certificate::from_pem(pem));
        let client = Client::connect(&endpoints, Some(ConnectOptions::new().with_tls(tls)))
            .await
            .expect("raw TLS client");
        EtcdHarness {
            store,
            client,
            prefix,
        }
    }

    pub async fn new(endpoints: &[String]) -> EtcdHarness {
        let prefix = format!("/leasehold-test/{}", unique_group("suite"));
        let store = EtcdStore::connect(conformance_options(endpoints).prefix(&prefix))
            .await
            .expect("connect to the test cluster");
        let client = Client::connect(endpoints, None).await.expect("raw client");
        EtcdHarness {
            store,
            client,
            prefix,
        }
    }
}

#[async_trait]
impl Harness for EtcdHarness {
    fn store(&self) -> Arc<dyn LeaseStore> {
        Arc::new(self.store.clone())
    }

    async fn corrupt_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
    ) -> Result<(), StoreError> {
        let key = format!("{}/{group}/lease/{:010}", self.prefix, partition.0);
        self.client
            .kv_client()
            .put(key, "{not json", None)
            .await
            .map_err(|e| StoreError::unavailable("corrupt a record", e))?;
        Ok(())
    }

    async fn corrupt_group(&self, group: &GroupName) -> Result<(), StoreError> {
        let key = format!("{}/{group}/group", self.prefix);
        self.client
            .kv_client()
            .put(key, "{not json", None)
            .await
            .map_err(|e| StoreError::unavailable("corrupt the group record", e))?;
        Ok(())
    }

    /// Values any etcd client could put, and keys under the group's prefixes that name no
    /// partition or node: etcd keys and values are bytes.
    async fn write_malformed(&self, group: &GroupName) -> Result<Vec<Malformed>, StoreError> {
        let leases = format!("{}/{group}/lease/", self.prefix);
        let members = format!("{}/{group}/member/", self.prefix);
        let mut writes: Vec<(Vec<u8>, Vec<u8>, Malformed)> = Vec::new();
        for (damage, value) in malformed_json_values() {
            let key = match &damage.key {
                RecordKey::Lease(partition) => format!("{leases}{:010}", partition.0),
                RecordKey::Member(node) => format!("{members}{node}"),
                other => panic!("not a record key: {other}"),
            };
            writes.push((key.into_bytes(), value, damage));
        }
        let released = br#"{"owner":null,"epoch":0,"state":"released"}"#.to_vec();
        let named_keys: [(&str, &[u8], Listed, &str); 5] = [
            (
                &leases,
                b"4294967296",
                Listed::Leases,
                "a partition beyond u32",
            ),
            (
                &leases,
                b"abcdefghij",
                Listed::Leases,
                "a partition that is not a number",
            ),
            (
                &leases,
                b"12",
                Listed::Leases,
                "a partition without its padding",
            ),
            (
                &leases,
                b"\xff\xfe\xfd\xfc\xfb\xfa\xf9\xf8\xf7\xf6",
                Listed::Leases,
                "a key that is not UTF-8",
            ),
            (&members, b"bad name", Listed::Members, "not a node name"),
        ];
        for (prefix, rest, listed, damage) in named_keys {
            let key = [prefix.as_bytes(), rest].concat();
            let shown = RecordKey::Stored(String::from_utf8_lossy(&key).into_owned());
            writes.push((key, released.clone(), Malformed::new(listed, shown, damage)));
        }
        let mut kv = self.client.kv_client();
        let mut malformed = Vec::new();
        for (key, value, damage) in writes {
            kv.put(key, value, None)
                .await
                .map_err(|e| StoreError::unavailable("write a malformed record", e))?;
            malformed.push(damage);
        }
        Ok(malformed)
    }
}

/// The largest batch one transaction takes, for tests of chunking.
pub const CHUNK: usize = MAX_TXN_OPS;

pub const NAMES: [&str; 3] = ["e1", "e2", "e3"];

/// Starts the stopped member again when dropped, so a failing test leaves a whole cluster.
pub struct StoppedMember {
    start_script: PathBuf,
}

impl Drop for StoppedMember {
    fn drop(&mut self) {
        let status = Command::new("bash").arg(&self.start_script).status();
        assert!(
            matches!(status, Ok(s) if s.success()),
            "restart: {status:?}"
        );
    }
}

/// Kills member `name` outright (no graceful leadership hand-off), as a crash would.
pub fn kill_member(pids_dir: &str, name: &str) -> StoppedMember {
    let dir = PathBuf::from(pids_dir);
    let pid = std::fs::read_to_string(dir.join(format!("etcd-{name}.pid"))).expect("pid file");
    let pid = pid.trim();
    let status = Command::new("kill")
        .args(["-KILL", "--", &format!("-{pid}")])
        .status();
    assert!(
        matches!(status, Ok(s) if s.success()),
        "kill {name}: {status:?}"
    );
    // Wait until it is gone so that the restart finds its ports free.
    let gone = (0..50).any(|_| {
        std::thread::sleep(Duration::from_millis(100));
        !PathBuf::from(format!("/proc/{pid}")).exists()
    });
    assert!(gone, "{name} did not exit");
    StoppedMember {
        start_script: dir.join(format!("etcd-{name}.start")),
    }
}

/// The index in `endpoints` of the member that is the raft leader now.
pub async fn leader_index(endpoints: &[String]) -> usize {
    for (index, endpoint) in endpoints.iter().enumerate() {
        let mut client = Client::connect([endpoint], None).await.expect("client");
        let status = client.status().await.expect("member status");
        let member = status.header().expect("header").member_id();
        if status.leader() == member {
            return index;
        }
    }
    panic!("no member says it is the leader");
}
