//! `demo`: several nodes in one process over one store, a crash, a drain, measured.
//!
//! The demo starts the nodes, waits for the partitions to be spread, crashes one node with
//! [`Participant::abort`] (nothing released, as after a kill) and measures how long its
//! partitions take to be re-acquired, then drains another and measures the cooperative
//! hand-off. Throughout, every acquisition is checked against every other node's view.

mod checker;
mod screen;

pub use self::screen::LogWriter;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use leasehold::{
    admin, GroupName, LeaseStore, NodeId, Participant, ParticipantConfig, PartitionId, TimeoutStore,
};
use tokio::time::Instant;

use self::checker::Checker;
use self::screen::{letter, Frame, NodeState, Screen};
use crate::cli::{Cli, DemoArgs};
use crate::Outcome;
use leasehold::duration::format_duration;
use leasehold_process::store_url;

/// How often the live map is redrawn and conditions are polled.
const POLL: Duration = Duration::from_millis(50);

/// The running demo: its nodes and what the map shows of them.
struct Fleet {
    started: Instant,
    nodes: Vec<Participant>,
    states: Mutex<Vec<NodeState>>,
    checker: Arc<Checker>,
    screen: Screen,
    store: Arc<dyn LeaseStore>,
    group: GroupName,
    partitions: u32,
    acquire_after: Duration,
}

/// A measured re-acquisition: from the event to the first and to the last partition taken.
struct Measured {
    first: Duration,
    last: Duration,
    partitions: usize,
}

/// The demo's store and whether it belongs to the demo alone.
struct DemoStore {
    /// The nodes' handle: each call limited to their `store_timeout` (the heartbeat).
    nodes: Arc<dyn LeaseStore>,
    /// The operator's handle (build-out, drain, clean-up), limited by `--timeout`: on a busy
    /// machine a call may take longer than the demo's heartbeat, which costs a node a renewal
    /// but must not fail the demo's own steps.
    operator: Arc<dyn LeaseStore>,
    description: String,
    /// A temporary file or `memory:`: nothing else can be using it.
    private: bool,
    _directory: Option<tempfile::TempDir>,
}

/// Runs `demo`.
pub async fn run(cli: &Cli, args: &DemoArgs) -> anyhow::Result<Outcome> {
    anyhow::ensure!(
        (3..=26).contains(&args.nodes),
        "--nodes {} is out of range: the demo needs 3 to 26 nodes (one to crash, one to drain, one to take over)",
        args.nodes
    );
    anyhow::ensure!(args.partitions > 0, "--partitions must be at least 1");
    let configs = configs(cli, args)?;
    let demo_store = open_store(cli, args.heartbeat).await?;
    let (store, group) = (&demo_store.operator, &cli.group);
    if !demo_store.private && !store.list_leases(group).await?.records.is_empty() {
        anyhow::bail!(
            "group {group} already exists in {}; the demo needs a group of its own (choose one with --group)",
            demo_store.description
        );
    }
    admin::init(&**store, group, args.partitions).await?;
    let fleet = Fleet::start(&demo_store, configs, args)?;
    fleet.say(&format!(
        "leasehold demo: {} nodes over {} partitions in {}\n  heartbeat {}, validity {}, acquire_after {}",
        args.nodes,
        args.partitions,
        demo_store.description,
        format_duration(args.heartbeat),
        format_duration(args.validity),
        format_duration(args.acquire_after),
    ));
    let outcome = tokio::select! {
        outcome = fleet.run(args) => outcome,
        _ = tokio::signal::ctrl_c() => {
            // Stop the nodes properly so the temporary store is removed and a shared one is
            // left without this demo's group.
            fleet.stop_all().await;
            Err(anyhow::anyhow!("interrupted"))
        }
    };
    if !demo_store.private {
        admin::destroy(&**store, group, admin::Destroy::Force).await?;
    }
    outcome
}

fn configs(cli: &Cli, args: &DemoArgs) -> anyhow::Result<Vec<ParticipantConfig>> {
    (0..args.nodes as usize)
        .map(|index| {
            let name = format!("node-{}", letter(index).to_ascii_lowercase());
            let node = NodeId::new(&name)?;
            let mut config =
                ParticipantConfig::fast(node, args.partitions).with_group(cli.group.clone());
            config.heartbeat = args.heartbeat;
            config.lease_validity = args.validity;
            config.acquire_after = args.acquire_after;
            config.scan_interval = args.heartbeat;
            config.store_timeout = args.heartbeat;
            config
                .validate()
                .context("invalid demo timings (--heartbeat, --validity, --acquire-after)")?;
            Ok(config)
        })
        .collect()
}

/// `--store` if given, otherwise an SQLite file in a temporary directory removed at the end;
/// the nodes' calls limited to their `store_timeout`, the operator's to `--timeout`.
async fn open_store(cli: &Cli, store_timeout: Duration) -> anyhow::Result<DemoStore> {
    if cli.store.is_some() {
        let url = cli.store_url()?;
        let nodes = store_url::open(&url, store_timeout).await?;
        // A second opening of `memory:` would be another, empty store.
        let operator = match url {
            store_url::StoreUrl::Memory => Arc::clone(&nodes),
            _ => store_url::open(&url, cli.timeout).await?,
        };
        return Ok(DemoStore {
            nodes,
            operator: Arc::new(TimeoutStore::new(operator, cli.timeout)),
            description: url.to_string(),
            private: !url.is_shared(),
            _directory: None,
        });
    }
    let directory = tempfile::Builder::new()
        .prefix("leasehold-demo")
        .tempdir()
        .context("cannot create a temporary directory for the demo's store")?;
    let path = directory.path().join("demo.db");
    Ok(DemoStore {
        nodes: store_url::open_scratch_sqlite(&path, store_timeout).await?,
        operator: Arc::new(TimeoutStore::new(
            store_url::open_scratch_sqlite(&path, cli.timeout).await?,
            cli.timeout,
        )),
        description: format!("sqlite:{} (temporary)", path.display()),
        private: true,
        _directory: Some(directory),
    })
}

/// Why a phase did not finish.
struct TimedOut(&'static str);

impl Fleet {
    fn start(
        store: &DemoStore,
        configs: Vec<ParticipantConfig>,
        args: &DemoArgs,
    ) -> anyhow::Result<Fleet> {
        let group = configs[0].group.clone();
        let names = configs.iter().map(|c| c.node.to_string()).collect();
        let checker = Checker::new(args.partitions, names);
        let mut nodes = Vec::new();
        for (index, config) in configs.into_iter().enumerate() {
            let participant =
                Participant::start(Arc::clone(&store.nodes), config, checker.callbacks(index))?;
            checker.register(participant.clone());
            nodes.push(participant);
        }
        Ok(Fleet {
            started: Instant::now(),
            states: Mutex::new(vec![NodeState::Running; nodes.len()]),
            nodes,
            checker,
            screen: Screen::new(),
            store: Arc::clone(&store.operator),
            group,
            partitions: args.partitions,
            acquire_after: args.acquire_after,
        })
    }

    async fn run(&self, args: &DemoArgs) -> anyhow::Result<Outcome> {
        let limit = Duration::from_secs(10) + args.acquire_after * 10;
        let measured = self.phases(limit).await;
        self.stop_all().await;
        self.snapshot();
        let violations = self.checker.violations();
        for violation in &violations {
            self.say(&format!("VIOLATION: {violation}"));
        }
        let (failover, handoff) = match &measured {
            Ok(pair) => (Some(&pair.0), Some(&pair.1)),
            Err(TimedOut(what)) => {
                self.say(&format!(
                    "TIMED OUT after {}: {what}",
                    format_duration(limit)
                ));
                (None, None)
            }
        };
        self.summary(args, failover, handoff, violations.len());
        Ok(if violations.is_empty() && measured.is_ok() {
            Outcome::Success
        } else {
            Outcome::ProblemsFound
        })
    }

    async fn phases(&self, limit: Duration) -> Result<(Measured, Measured), TimedOut> {
        self.wait_until(limit, "the partitions to be spread", || self.settled())
            .await?;
        self.say(&format!(
            "[{}] every partition held, spread over {} nodes",
            self.clock(),
            self.nodes.len()
        ));
        self.snapshot();

        let failover = self.crash(self.busiest(), limit).await?;
        self.wait_until(limit, "the survivors to settle", || self.settled())
            .await?;
        let handoff = self.drain(self.busiest(), limit).await?;
        Ok((failover, handoff))
    }

    /// Stops node `index` as a kill would and measures how soon its partitions are taken.
    async fn crash(&self, index: usize, limit: Duration) -> Result<Measured, TimedOut> {
        let victim = &self.nodes[index];
        let held = victim.owned();
        victim.abort();
        let crashed_at = Instant::now();
        self.set_state(index, NodeState::Crashed);
        self.say(&format!(
            "[{}] crashed {} (aborted: nothing released): it held {} partitions",
            self.clock(),
            victim.node(),
            held.len()
        ));
        self.wait_until(
            limit,
            "the crashed node's partitions to be re-acquired",
            || self.all_held(&held),
        )
        .await?;
        let measured = self.measure(&held, crashed_at);
        self.say(&format!(
            "[{}] failover: {} partitions re-acquired; first after {}, last after {} \
             (acquire_after = {}, counted from each lease's last renewal before the crash)",
            self.clock(),
            measured.partitions,
            format_duration(measured.first),
            format_duration(measured.last),
            format_duration(self.acquire_after),
        ));
        self.snapshot();
        Ok(measured)
    }

    /// Drains node `index` and measures the cooperative hand-off of its partitions.
    async fn drain(&self, index: usize, limit: Duration) -> Result<Measured, TimedOut> {
        let node = &self.nodes[index];
        let held = node.owned();
        let drained_at = Instant::now();
        if let Err(error) = admin::set_draining(&*self.store, &self.group, node.node(), true).await
        {
            self.say(&format!("could not drain {}: {error}", node.node()));
            return Err(TimedOut("the drain flag to be written"));
        }
        self.set_state(index, NodeState::Draining);
        self.say(&format!(
            "[{}] draining {}: it holds {} partitions",
            self.clock(),
            node.node(),
            held.len()
        ));
        self.wait_until(
            limit,
            "the drained node's partitions to be handed off",
            || node.owned().is_empty() && self.all_held(&held),
        )
        .await?;
        let measured = self.measure(&held, drained_at);
        self.say(&format!(
            "[{}] hand-off: {} partitions re-acquired; first after {}, last after {} (no expiry wait)",
            self.clock(),
            measured.partitions,
            format_duration(measured.first),
            format_duration(measured.last),
        ));
        self.snapshot();
        Ok(measured)
    }

    async fn stop_all(&self) {
        let running: Vec<usize> = (0..self.nodes.len())
            .filter(|i| self.state(*i) != NodeState::Crashed)
            .collect();
        let shutdowns = running.iter().map(|i| self.nodes[*i].shutdown());
        for shutdown in shutdowns {
            shutdown.await;
        }
        for index in running {
            self.set_state(index, NodeState::Stopped);
        }
        self.say(&format!(
            "[{}] shut down the other nodes (leases released)",
            self.clock()
        ));
    }

    fn summary(
        &self,
        args: &DemoArgs,
        failover: Option<&Measured>,
        handoff: Option<&Measured>,
        violations: usize,
    ) {
        let (max_epoch, acquisitions) = self.checker.epochs();
        let describe = |measured: Option<&Measured>| match measured {
            Some(m) => format!(
                "first {}, last {}",
                format_duration(m.first),
                format_duration(m.last)
            ),
            None => "not measured".to_owned(),
        };
        let lines = [
            "summary".to_owned(),
            format!("  nodes:                 {}", args.nodes),
            format!("  partitions:            {}", args.partitions),
            format!(
                "  failover after crash:  {} (acquire_after {})",
                describe(failover),
                format_duration(args.acquire_after)
            ),
            format!("  hand-off after drain:  {}", describe(handoff)),
            format!("  acquisitions:          {acquisitions}, highest epoch {max_epoch}"),
            format!("  overlaps:              {violations} (checked at every acquisition)"),
            format!(
                "  result:                {}",
                if violations == 0 && failover.is_some() {
                    "OK"
                } else {
                    "FAILED"
                }
            ),
        ];
        self.say(&lines.join("\n"));
    }

    /// Polls `condition` while redrawing the map, for at most `limit`.
    async fn wait_until(
        &self,
        limit: Duration,
        what: &'static str,
        condition: impl Fn() -> bool,
    ) -> Result<(), TimedOut> {
        let deadline = Instant::now() + limit;
        loop {
            self.draw();
            if condition() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(TimedOut(what));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// The running node holding the most partitions, so that each event moves some.
    fn busiest(&self) -> usize {
        (0..self.nodes.len())
            .filter(|i| self.state(*i) == NodeState::Running)
            .max_by_key(|i| (self.nodes[*i].owned().len(), std::cmp::Reverse(*i)))
            .expect("the demo keeps at least one node running")
    }

    fn holder(&self, partition: PartitionId) -> Option<usize> {
        self.nodes
            .iter()
            .position(|node| node.lease(partition).is_some())
    }

    fn all_held(&self, partitions: &[PartitionId]) -> bool {
        partitions.iter().all(|p| self.holder(*p).is_some())
    }

    /// Every partition held, and every running node holding its even share: ⌊P/N⌋ or
    /// ⌈P/N⌉ of them. Judged from what the nodes hold, not from the targets they believe:
    /// a node that has not yet seen the others believes the whole table is its share.
    fn settled(&self) -> bool {
        let all: Vec<PartitionId> = (0..self.partitions).map(PartitionId).collect();
        let running: Vec<&Participant> = (0..self.nodes.len())
            .filter(|i| self.state(*i) == NodeState::Running)
            .map(|i| &self.nodes[i])
            .collect();
        let partitions = self.partitions as usize;
        let (low, high) = (
            partitions / running.len().max(1),
            partitions.div_ceil(running.len().max(1)),
        );
        self.all_held(&all)
            && running
                .iter()
                .all(|node| (low..=high).contains(&node.owned().len()))
    }

    fn measure(&self, partitions: &[PartitionId], since: Instant) -> Measured {
        let delays: Vec<Duration> = self
            .checker
            .first_acquisitions_since(partitions, since)
            .into_iter()
            .flatten()
            .map(|a| a.at.saturating_duration_since(since))
            .collect();
        Measured {
            first: delays.iter().min().copied().unwrap_or_default(),
            last: delays.iter().max().copied().unwrap_or_default(),
            partitions: delays.len(),
        }
    }

    fn clock(&self) -> String {
        format!("{:>6.2}s", self.started.elapsed().as_secs_f64())
    }

    fn state(&self, index: usize) -> NodeState {
        self.states.lock().unwrap_or_else(|e| e.into_inner())[index]
    }

    fn set_state(&self, index: usize, state: NodeState) {
        self.states.lock().unwrap_or_else(|e| e.into_inner())[index] = state;
    }

    fn frame(&self) -> Frame {
        Frame {
            holders: (0..self.partitions)
                .map(|p| self.holder(PartitionId(p)))
                .collect(),
            states: self
                .states
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            last_event: self.checker.last_event(),
        }
    }

    fn say(&self, line: &str) {
        self.screen.say(line);
    }

    fn draw(&self) {
        self.screen.draw(&self.frame());
    }

    fn snapshot(&self) {
        self.screen.snapshot(&self.frame());
    }
}
