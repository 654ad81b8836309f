//! A three-member etcd cluster whose members live in network namespaces of their own,
//! joined by a bridge, so that the network between the members can be cut while the nodes
//! still reach each of them: the leader cut from the other two keeps its clients, loses its
//! quorum, and the others elect a new leader. A cut is a blackhole route inside the
//! namespaces (packets silently dropped, as on a partition); everything the cluster creates
//! (namespaces, bridge, addresses, routes, processes, data) is removed when it is dropped.
//!
//! Needs root (CI runs as root), `ip` (iproute2) and `etcd`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use crate::common::Site;

/// Members of the cluster.
const MEMBERS: usize = 3;

/// The cluster, running.
pub struct Cluster {
    /// A name prefix unique to this run, for namespaces and links (at most 15 characters
    /// with their suffixes).
    prefix: String,
    /// The /24 network the bridge and the members are on: `10.231.N`.
    network: String,
    members: Vec<Child>,
}

/// Runs `ip args...`, panicking with its error output if it fails.
fn ip(args: &[&str]) {
    let output = Command::new("ip")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run ip {args:?}: {e}"));
    assert!(
        output.status.success(),
        "ip {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
}

impl Cluster {
    /// Whether the cluster can be built here: root, `ip` and `etcd`. A missing tool fails
    /// the test with its install hint, and so does a user other than root, unless skips are
    /// asked for (`LEASEHOLD_SKIP_SERVICES=1`).
    pub fn possible() -> bool {
        let tools = leasehold::testing::require_tool("ip", "iproute2")
            && leasehold::testing::require_tool("etcd", "etcd-server");
        if !tools {
            return false;
        }
        let uid = Command::new("id").arg("-u").output().ok();
        let root = uid.is_some_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0");
        if !root {
            let skip = std::env::var(leasehold::testing::SKIP_VARIABLE).as_deref() == Ok("1");
            assert!(
                skip,
                "network namespaces need root; run the suite as root (as CI does), or set {}=1 \
                 to skip such tests",
                leasehold::testing::SKIP_VARIABLE
            );
            eprintln!("skipped: network namespaces need root");
        }
        root
    }

    /// Builds the namespaces and the bridge, and starts the members with their data in
    /// `site`; returns once every member answers.
    pub fn start(site: &Site) -> Cluster {
        let id = std::process::id();
        let prefix = format!("lhn{}", id % 100_000);
        let network = format!("10.231.{}", id % 250 + 1);
        let mut cluster = Cluster {
            prefix,
            network,
            members: Vec::new(),
        };
        let (bridge, network) = (cluster.bridge(), cluster.network.clone());
        ip(&["link", "add", &bridge, "type", "bridge"]);
        ip(&["addr", "add", &format!("{network}.1/24"), "dev", &bridge]);
        ip(&["link", "set", &bridge, "up"]);
        for member in 0..MEMBERS {
            let (namespace, host, inside) = (
                cluster.namespace(member),
                format!("{}h{member}", cluster.prefix),
                format!("{}m{member}", cluster.prefix),
            );
            ip(&["netns", "add", &namespace]);
            ip(&[
                "link", "add", &host, "type", "veth", "peer", "name", &inside,
            ]);
            ip(&["link", "set", &inside, "netns", &namespace]);
            ip(&["link", "set", &host, "master", &bridge]);
            ip(&["link", "set", &host, "up"]);
            let address = format!("{}/24", cluster.address(member));
            ip(&["-n", &namespace, "addr", "add", &address, "dev", &inside]);
            ip(&["-n", &namespace, "link", "set", &inside, "up"]);
            ip(&["-n", &namespace, "link", "set", "lo", "up"]);
        }
        let initial: Vec<String> = (0..MEMBERS)
            .map(|m| format!("e{m}=http://{}:2380", cluster.address(m)))
            .collect();
        for member in 0..MEMBERS {
            let address = cluster.address(member);
            let log = std::fs::File::create(site.path(&format!("etcd-{member}.err")))
                .expect("etcd log file");
            let child = Command::new("ip")
                .args(["netns", "exec", &cluster.namespace(member), "etcd"])
                .args(["--name", &format!("e{member}")])
                .arg(format!(
                    "--data-dir={}",
                    site.path(&format!("etcd-{member}")).display()
                ))
                .arg(format!("--listen-client-urls=http://{address}:2379"))
                .arg(format!("--advertise-client-urls=http://{address}:2379"))
                .arg(format!("--listen-peer-urls=http://{address}:2380"))
                .arg(format!(
                    "--initial-advertise-peer-urls=http://{address}:2380"
                ))
                .arg(format!("--initial-cluster={}", initial.join(",")))
                .args(["--initial-cluster-token", "leasehold-nemesis"])
                .args(["--initial-cluster-state", "new"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("start etcd in its namespace");
            cluster.members.push(child);
        }
        let ready = Instant::now() + Duration::from_secs(60);
        while cluster.leader().is_none() {
            assert!(
                Instant::now() < ready,
                "the etcd cluster in namespaces elected no leader within a minute"
            );
            sleep(Duration::from_millis(200));
        }
        cluster
    }

    fn bridge(&self) -> String {
        format!("{}br", self.prefix)
    }

    fn namespace(&self, member: usize) -> String {
        format!("{}ns{member}", self.prefix)
    }

    fn address(&self, member: usize) -> String {
        format!("{}.{}", self.network, 11 + member)
    }

    /// The members' client endpoints, `HOST:PORT` each.
    pub fn endpoints(&self) -> Vec<String> {
        (0..MEMBERS)
            .map(|m| format!("{}:2379", self.address(m)))
            .collect()
    }

    /// The member that says it leads, if one does.
    pub fn leader(&self) -> Option<usize> {
        self.leader_among((0..MEMBERS).collect())
    }

    /// A member other than `member` that says it leads, if one does.
    pub fn leader_other_than(&self, member: usize) -> Option<usize> {
        self.leader_among((0..MEMBERS).filter(|m| *m != member).collect())
    }

    fn leader_among(&self, members: Vec<usize>) -> Option<usize> {
        members.into_iter().find(|&member| {
            metrics(&format!("{}:2379", self.address(member)))
                .is_some_and(|text| text.lines().any(|line| line == "etcd_server_is_leader 1"))
        })
    }

    /// Cuts `member` from the other members, both ways, leaving every client path open.
    pub fn isolate(&self, member: usize) {
        self.routes("add", member);
    }

    /// Undoes [`Cluster::isolate`].
    pub fn heal(&self, member: usize) {
        self.routes("del", member);
    }

    fn routes(&self, action: &str, member: usize) {
        for other in (0..MEMBERS).filter(|other| *other != member) {
            for (inside, to) in [(member, other), (other, member)] {
                let target = format!("{}/32", self.address(to));
                ip(&[
                    "-n",
                    &self.namespace(inside),
                    "route",
                    action,
                    "blackhole",
                    &target,
                ]);
            }
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for child in &mut self.members {
            let _ = child.kill();
            let _ = child.wait();
        }
        for member in 0..MEMBERS {
            let _ = Command::new("ip")
                .args(["netns", "del", &self.namespace(member)])
                .status();
        }
        let _ = Command::new("ip")
            .args(["link", "del", &self.bridge()])
            .status();
    }
}

/// `GET /metrics` from an etcd member, within a second; `None` if it does not answer.
fn metrics(address: &str) -> Option<String> {
    let address: SocketAddr = address.parse().ok()?;
    let limit = Duration::from_secs(1);
    let mut stream = TcpStream::connect_timeout(&address, limit).ok()?;
    stream.set_read_timeout(Some(limit)).ok()?;
    stream.set_write_timeout(Some(limit)).ok()?;
    let request = format!("GET /metrics HTTP/1.0\r\nHost: {address}\r\n\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    Some(text)
}
