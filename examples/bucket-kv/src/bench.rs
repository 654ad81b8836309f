//! The scenario runner: starts real server processes on loopback, runs the load generator
//! through a rolling restart, a crash or a join, and reports what the clients saw.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use leasehold::ROUTER_STORE_TIMEOUT;
use leasehold::{admin, GroupName, LeaseStore, Router};
use leasehold_process::store_url;
use serde::Serialize;
use tokio::process::{Child, Command};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::api::GROUP;
use crate::client::{Client, RetryPolicy};
use crate::data::DataStore;
use crate::load::{self, LoadConfig, LoadReport};

/// The longest a server may take to exit after SIGTERM, or to become ready.
const PROCESS_TIMEOUT: Duration = Duration::from_secs(20);

/// What happens to the fleet while the load runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Scenario {
    /// SIGTERM each server in turn, wait for it to exit, start it again under the same name
    /// and wait until it is ready before the next.
    Rolling,
    /// SIGKILL one server, then start it again.
    Crash,
    /// Start one more server.
    Join,
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Scenario::Rolling => "rolling",
            Scenario::Crash => "crash",
            Scenario::Join => "join",
        })
    }
}

/// A bench run's settings.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// The `bucket-kv` binary to start servers from.
    pub exe: PathBuf,
    /// Servers at the start.
    pub servers: usize,
    /// Buckets.
    pub buckets: u32,
    /// What to do to the fleet.
    pub scenario: Scenario,
    /// Load client tasks.
    pub clients: usize,
    /// Total request rate, per second.
    pub rate: f64,
    /// How long the load runs before and after the scenario's steps, and between them.
    pub settle: Duration,
    /// How long a crashed server stays down before it is started again.
    pub down_for: Duration,
    /// How the load's client retries.
    pub retry: RetryPolicy,
}

/// Something the runner did, and when (seconds from the start of the load).
#[derive(Debug, Clone, Serialize)]
pub struct Event {
    /// Seconds from the start of the load.
    pub at_seconds: f64,
    /// What happened.
    pub what: String,
}

/// What a bench run measured.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    /// The scenario run.
    pub scenario: Scenario,
    /// Servers at the start.
    pub servers: usize,
    /// Buckets.
    pub buckets: u32,
    /// What the load generator saw.
    pub load: LoadReport,
    /// The runner's steps, in order.
    pub events: Vec<Event>,
    /// When a server was killed, for the crash scenario (seconds from the start of the load).
    pub killed_at_seconds: Option<f64>,
    /// Writes the data table refused as stale, all servers together.
    pub stale_writes_refused: u64,
    /// The highest epoch each bucket accepted: every bucket written has one.
    pub buckets_fenced: usize,
}

impl fmt::Display for BenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "scenario {}: {} servers, {} buckets, {:.1} s of load",
            self.scenario, self.servers, self.buckets, self.load.elapsed_seconds
        )?;
        for event in &self.events {
            writeln!(f, "  {:>6.2} s  {}", event.at_seconds, event.what)?;
        }
        write!(f, "{}", self.load)?;
        writeln!(
            f,
            "stale writes refused: {}; buckets written: {}",
            self.stale_writes_refused, self.buckets_fenced
        )
    }
}

/// Runs one scenario in a fresh temporary directory and returns what it measured. Every
/// server process is stopped before it returns, whatever happened.
pub async fn run(config: &BenchConfig) -> anyhow::Result<BenchReport> {
    let directory = tempfile::tempdir().context("creating a temporary directory")?;
    let mut fleet = Fleet::new(config, directory.path()).await?;
    let result = drive(config, &mut fleet).await;
    fleet.stop_all().await;
    let data = DataStore::open(&fleet.data_path, Duration::from_secs(5))?;
    let mut report = result?;
    report.stale_writes_refused = data.stale_writes_refused().await?;
    report.buckets_fenced = data.fences().await?.len();
    Ok(report)
}

async fn drive(config: &BenchConfig, fleet: &mut Fleet) -> anyhow::Result<BenchReport> {
    for index in 1..=config.servers {
        fleet.start(&format!("server-{index}")).await?;
    }
    for index in 1..=config.servers {
        fleet.wait_ready(&format!("server-{index}")).await?;
    }
    fleet.wait_all_owned().await?;
    let client = Client::connect(
        Arc::clone(&fleet.store),
        config.buckets,
        fleet.urls(),
        config.retry.clone(),
    )
    .await?;
    let load_config = LoadConfig {
        clients: config.clients,
        rate: config.rate,
        keys_per_client: 64,
        key_prefix: String::new(),
    };
    let origin = Instant::now();
    let (stop, stopped) = watch::channel(false);
    let load = tokio::spawn({
        let client = client.clone();
        async move { load::run(&client, &load_config, origin, stopped).await }
    });
    let mut events = Vec::new();
    let mut note = |what: String| {
        events.push(Event {
            at_seconds: origin.elapsed().as_secs_f64(),
            what,
        })
    };
    let mut killed_at_seconds = None;
    tokio::time::sleep(config.settle).await;
    let steps = async {
        match config.scenario {
            Scenario::Rolling => {
                for index in 1..=config.servers {
                    let name = format!("server-{index}");
                    note(format!("SIGTERM {name}"));
                    let status = fleet.terminate(&name).await?;
                    note(format!("{name} exited ({status})"));
                    if !status.success() {
                        bail!("{name} exited with {status} after SIGTERM");
                    }
                    fleet.start(&name).await?;
                    fleet.wait_ready(&name).await?;
                    note(format!("{name} restarted and ready"));
                    tokio::time::sleep(config.settle).await;
                }
            }
            Scenario::Crash => {
                let name = "server-1";
                killed_at_seconds = Some(origin.elapsed().as_secs_f64());
                fleet.kill(name).await?;
                note(format!("SIGKILL {name}"));
                tokio::time::sleep(config.down_for).await;
                fleet.start(name).await?;
                fleet.wait_ready(name).await?;
                note(format!("{name} restarted and ready"));
            }
            Scenario::Join => {
                let name = format!("server-{}", config.servers + 1);
                note(format!("start {name}"));
                fleet.start(&name).await?;
                fleet.wait_ready(&name).await?;
                note(format!("{name} ready"));
            }
        }
        tokio::time::sleep(config.settle).await;
        Ok(())
    };
    let outcome = steps.await;
    let _ = stop.send(true);
    let load = load.await.context("the load generator failed")?;
    outcome?;
    Ok(BenchReport {
        scenario: config.scenario,
        servers: config.servers,
        buckets: config.buckets,
        load,
        events,
        killed_at_seconds,
        stale_writes_refused: 0,
        buckets_fenced: 0,
    })
}

struct Server {
    child: Child,
    port: u16,
}

/// The server processes of one run, with their files in one directory.
struct Fleet {
    exe: PathBuf,
    directory: PathBuf,
    store_url: String,
    data_path: PathBuf,
    buckets: u32,
    store: Arc<dyn LeaseStore>,
    http: reqwest::Client,
    servers: BTreeMap<String, Server>,
    /// Ports stay with a name across restarts, so the address a client cached stays right.
    ports: BTreeMap<String, u16>,
}

impl Fleet {
    async fn new(config: &BenchConfig, directory: &Path) -> anyhow::Result<Fleet> {
        let lease_path = directory.join("leases.db");
        let store_url = format!("sqlite://{}", lease_path.display());
        let store: Arc<dyn LeaseStore> =
            store_url::open_url(&store_url, ROUTER_STORE_TIMEOUT).await?;
        admin::init(&*store, &GroupName::new(GROUP)?, config.buckets).await?;
        Ok(Fleet {
            exe: config.exe.clone(),
            directory: directory.to_owned(),
            store_url,
            data_path: directory.join("data.db"),
            buckets: config.buckets,
            store,
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(1))
                .build()?,
            servers: BTreeMap::new(),
            ports: BTreeMap::new(),
        })
    }

    fn urls(&self) -> Vec<String> {
        self.ports
            .values()
            .map(|port| format!("http://127.0.0.1:{port}"))
            .collect()
    }

    async fn start(&mut self, name: &str) -> anyhow::Result<()> {
        let port = match self.ports.get(name) {
            Some(port) => *port,
            None => free_port()?,
        };
        self.ports.insert(name.to_owned(), port);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.directory.join(format!("{name}.log")))?;
        let child = Command::new(&self.exe)
            .arg("server")
            .args(["--id", name])
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--store", &self.store_url])
            .arg("--data")
            .arg(&self.data_path)
            .args(["--buckets", &self.buckets.to_string()])
            .arg("--fast")
            // An error that ends a server prints its causes without a backtrace, so that the
            // end of its log, which a failed start reports, shows why.
            .env("RUST_LIB_BACKTRACE", "0")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", self.exe.display()))?;
        self.servers.insert(name.to_owned(), Server { child, port });
        Ok(())
    }

    async fn wait_ready(&mut self, name: &str) -> anyhow::Result<()> {
        let deadline = Instant::now() + PROCESS_TIMEOUT;
        let server = self
            .servers
            .get_mut(name)
            .with_context(|| format!("no server {name}"))?;
        let url = format!("http://127.0.0.1:{}/readyz", server.port);
        loop {
            if let Some(status) = server.child.try_wait()? {
                let log = self.directory.join(format!("{name}.log"));
                bail!(
                    "{name} exited with {status} before it was ready; the end of its log:\n{}",
                    log_tail(&log, 20)
                );
            }
            if let Ok(response) = self.http.get(&url).send().await {
                if response.status().is_success() {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                bail!("{name} was not ready within {PROCESS_TIMEOUT:?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until every bucket has an owner, so that the load starts on a settled fleet.
    async fn wait_all_owned(&self) -> anyhow::Result<()> {
        let router = Router::connect(
            Arc::clone(&self.store),
            GroupName::new(GROUP)?,
            self.buckets,
        )
        .await?;
        let deadline = Instant::now() + PROCESS_TIMEOUT;
        loop {
            router.refresh().await?;
            if router.map().values().all(Option::is_some) {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("some buckets had no owner {PROCESS_TIMEOUT:?} after the start");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn terminate(&mut self, name: &str) -> anyhow::Result<std::process::ExitStatus> {
        let mut server = self
            .servers
            .remove(name)
            .with_context(|| format!("no server {name}"))?;
        let pid = server
            .child
            .id()
            .and_then(|pid| i32::try_from(pid).ok())
            .and_then(rustix::process::Pid::from_raw)
            .with_context(|| format!("{name} has no process id"))?;
        rustix::process::kill_process(pid, rustix::process::Signal::TERM)
            .with_context(|| format!("signalling {name}"))?;
        match tokio::time::timeout(PROCESS_TIMEOUT, server.child.wait()).await {
            Ok(status) => Ok(status?),
            Err(_) => {
                server.child.kill().await.ok();
                bail!("{name} did not exit within {PROCESS_TIMEOUT:?} of SIGTERM")
            }
        }
    }

    async fn kill(&mut self, name: &str) -> anyhow::Result<()> {
        let mut server = self
            .servers
            .remove(name)
            .with_context(|| format!("no server {name}"))?;
        server.child.kill().await?;
        Ok(())
    }

    /// Stops every server gracefully, killing any that does not exit in time.
    async fn stop_all(&mut self) {
        let names: Vec<String> = self.servers.keys().cloned().collect();
        for name in names {
            if let Err(error) = self.terminate(&name).await {
                tracing::warn!(%error, "stopping {name}");
            }
        }
    }
}

/// A loopback port that was free a moment ago.
/// The last `lines` lines of the file at `path`, or why it could not be read.
fn log_tail(path: &Path, lines: usize) -> String {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(error) => format!("({} unreadable: {error})", path.display()),
    }
}

fn free_port() -> anyhow::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}
