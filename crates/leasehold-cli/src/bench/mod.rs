//! `bench`: a fleet of real `leasehold node` processes on any store, put through the changes
//! a fleet lives through — cold start, crash, pause, leave, replacement, join, rolling restart
//! — each measured from the nodes' fence logs: how long until every partition is owned again
//! and the fleet is balanced, how many partition-seconds went unowned, how many partitions
//! moved against the fewest possible, and whether any partition ever had two owners.
//!
//! It is what an operator runs to choose timings for a store: the same figures at the
//! timings they mean to deploy, on the store they mean to deploy on. With `--steady` it also
//! measures the store load of the settled fleet, from the nodes' own metrics.

mod fleet;
mod report;
mod steady;
pub mod timeline;

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::time::Duration;

use anyhow::Context;
use leasehold::admin::{self, Destroy};
use leasehold::{GroupTimings, LeaseMode, LeaseStore};

use self::fleet::{now_ns, Fleet, Signal};
use self::report::Report;
use self::steady::{Scrape, SteadyFigures};
use self::timeline::{Figures, Window};
use crate::cli::{BenchArgs, Change, Cli};
use crate::group_table::GroupTable;
use crate::Outcome;
use leasehold_process::store_url::DEFAULT_STORE;

/// The settings of a bench, checked.
#[derive(Debug, Clone)]
pub struct Settings {
    nodes: usize,
    partitions: u32,
    runs: usize,
    changes: Vec<Change>,
    heartbeat: Duration,
    validity: Duration,
    acquire_after: Duration,
    scan_interval: Duration,
    store_timeout: Duration,
    pause: Duration,
    quiet: Duration,
    limit: Duration,
    lease_mode: LeaseMode,
    /// The window of the steady-state measurement; zero for none.
    steady: Duration,
    /// Whether nodes stop by restarting in place.
    restart_in_place: bool,
}

impl Settings {
    fn from_args(args: &BenchArgs) -> anyhow::Result<Settings> {
        anyhow::ensure!(
            (2..=64).contains(&args.nodes),
            "--nodes {} is out of range: a bench needs 2 to 64 nodes",
            args.nodes
        );
        anyhow::ensure!(
            (1..=65_536).contains(&args.partitions),
            "--partitions {} is out of range (1 to 65536)",
            args.partitions
        );
        anyhow::ensure!(
            (1..=1000).contains(&args.runs),
            "--runs {} is out of range (1 to 1000)",
            args.runs
        );
        let mut changes = args.changes.clone();
        changes.sort();
        changes.dedup();
        anyhow::ensure!(!changes.is_empty(), "--changes names no change");
        let settings = Settings {
            nodes: args.nodes,
            partitions: args.partitions,
            runs: args.runs,
            changes,
            heartbeat: args.heartbeat,
            validity: args.validity,
            acquire_after: args.acquire_after,
            scan_interval: args.scan_interval,
            store_timeout: args.store_timeout.unwrap_or(args.heartbeat),
            pause: args.pause.unwrap_or(args.acquire_after * 2),
            quiet: args
                .quiet
                .unwrap_or(args.scan_interval * 2 + args.heartbeat),
            limit: args
                .limit
                .unwrap_or(args.acquire_after * 4 + Duration::from_secs(20)),
            lease_mode: args.lease_mode,
            steady: args.steady,
            restart_in_place: args.restart_in_place,
        };
        anyhow::ensure!(
            settings.pause > settings.validity,
            "--pause {:?} must be longer than the lease validity {:?}, or the paused node keeps its leases",
            settings.pause,
            settings.validity
        );
        anyhow::ensure!(
            !settings.quiet.is_zero() && !settings.limit.is_zero(),
            "--quiet and --limit must be greater than zero"
        );
        // A node writes once a heartbeat: a shorter window would see some nodes not at all.
        anyhow::ensure!(
            settings.steady.is_zero() || settings.steady >= settings.heartbeat,
            "--steady {:?} must be 0s or at least the heartbeat {:?}",
            settings.steady,
            settings.heartbeat
        );
        Ok(settings)
    }

    fn timings(&self) -> GroupTimings {
        GroupTimings {
            lease_validity: self.validity,
            acquire_after: self.acquire_after,
            max_clock_drift: 0.01,
        }
    }

    fn node_flags(&self) -> Vec<OsString> {
        let flag = |name: &str, value: Duration| {
            [
                OsString::from(name),
                OsString::from(format!("{}ms", value.as_millis().max(1))),
            ]
        };
        [
            flag("--heartbeat", self.heartbeat),
            flag("--validity", self.validity),
            flag("--acquire-after", self.acquire_after),
            flag("--scan-interval", self.scan_interval),
            flag("--store-timeout", self.store_timeout),
        ]
        .into_iter()
        .flatten()
        .chain(
            self.restart_in_place
                .then(|| OsString::from("--restart-in-place")),
        )
        // Port 0: each node picks a free port and prints it, so nodes never collide.
        .chain(
            (!self.steady.is_zero())
                .then(|| ["--metrics-listen".into(), "127.0.0.1:0".into()])
                .into_iter()
                .flatten(),
        )
        .collect()
    }
}

/// Runs `bench`: exit 0 when every change of every run completed with no partition ever
/// held by two nodes, 1 otherwise.
pub async fn run(cli: &Cli, args: &BenchArgs) -> anyhow::Result<Outcome> {
    let settings = Settings::from_args(args)?;
    // Node timings are checked by the nodes themselves; checking them here fails at once
    // instead of in every child.
    let mut config = leasehold::ParticipantConfig::new(
        leasehold::NodeId::new("bench").expect("a valid name"),
        settings.partitions,
    );
    config.heartbeat = settings.heartbeat;
    config.lease_validity = settings.validity;
    config.acquire_after = settings.acquire_after;
    config.scan_interval = settings.scan_interval;
    config.store_timeout = settings.store_timeout;
    config.validate().context("invalid node timings")?;

    // The nodes are separate processes: they must all reach the store the bench reads.
    let url = cli.store_url()?;
    anyhow::ensure!(
        url.is_shared(),
        "the bench runs its nodes as separate processes, which cannot share {url}; use a store \
         they all reach, such as sqlite:bench.db"
    );
    let table = GroupTable::open(cli).await?;
    refuse_group_in_use(&table).await?;
    let exe = std::env::current_exe().context("cannot find the leasehold executable")?;
    let store = cli
        .store
        .clone()
        .unwrap_or_else(|| DEFAULT_STORE.to_owned());
    let global: Vec<OsString> = vec![
        "--store".into(),
        store.clone().into(),
        "--group".into(),
        cli.group.to_string().into(),
    ];
    let (logs, _temporary) = match &args.logs {
        Some(dir) => {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            (dir.clone(), None)
        }
        None => {
            let dir = tempfile::tempdir().context("cannot create a temporary directory")?;
            (dir.path().to_owned(), Some(dir))
        }
    };

    let mut report = Report::new(&settings, url.to_string());
    if !args.json {
        crate::say(&report.heading())?;
    }
    for run in 0..settings.runs {
        let mut fleet = Fleet::new(
            exe.clone(),
            global.clone(),
            settings.node_flags(),
            &logs,
            run,
        );
        let outcome = one_run(&table, &settings, &mut fleet, &mut report).await;
        let stopped = fleet.stop_all(settings.limit).await;
        let destroyed = admin::destroy(&*table.store, &table.group, Destroy::Force)
            .await
            .map_err(anyhow::Error::from);
        let (_, malformed) = fleet.events()?;
        report.malformed += malformed;
        if let Err(error) = outcome.and(stopped).and(destroyed) {
            report.failures.push(format!("run {}: {error:#}", run + 1));
            if !args.json {
                crate::say(&format!("run {}: {error:#}", run + 1))?;
            }
            break;
        }
        if !args.json {
            crate::say(&report.progress(run + 1))?;
        }
    }
    if args.json {
        crate::write_out(&format!(
            "{}\n",
            serde_json::to_string_pretty(&report.json())?
        ))?;
    } else {
        crate::say(&report.table())?;
        if args.logs.is_some() {
            crate::say(&format!("node and fence logs kept in {}", logs.display()))?;
        }
    }
    Ok(if report.clean() {
        Outcome::Success
    } else {
        Outcome::ProblemsFound
    })
}

/// The bench builds its own table and deletes it after each run: never one in use.
pub(crate) async fn refuse_group_in_use(table: &GroupTable) -> anyhow::Result<()> {
    let leases = table.leases().await?;
    let members = table
        .store
        .list_members(&table.group)
        .await
        .with_context(|| format!("cannot list the members of group {}", table.group))?;
    anyhow::ensure!(
        leases.records.is_empty() && members.records.is_empty() && leases.corrupt.is_empty(),
        "group {} already has records ({} leases, {} members); the bench creates and deletes \
         its own group: name an unused one with --group",
        table.group,
        leases.records.len() + leases.corrupt.len(),
        members.records.len()
    );
    Ok(())
}

/// One run: the table built, the fleet started, and every change applied in turn.
async fn one_run(
    table: &GroupTable,
    settings: &Settings,
    fleet: &mut Fleet,
    report: &mut Report,
) -> anyhow::Result<()> {
    let store: &dyn LeaseStore = &*table.store;
    admin::init(store, &table.group, settings.partitions).await?;
    admin::set_timings(store, &table.group, settings.timings(), false).await?;
    // Always set: the group record outlives a run, and with it the mode of an earlier bench.
    admin::set_lease_mode(store, &table.group, settings.lease_mode).await?;
    let window = settings
        .restart_in_place
        .then_some(settings.acquire_after * leasehold::MAX_RESTART_WINDOW_FACTOR);
    admin::set_restart_window(store, &table.group, window).await?;
    let bench = Bench { settings, fleet };
    bench.apply_all(report).await
}

struct Bench<'a> {
    settings: &'a Settings,
    fleet: &'a mut Fleet,
}

impl Bench<'_> {
    async fn apply_all(mut self, report: &mut Report) -> anyhow::Result<()> {
        let start = now_ns();
        for _ in 0..self.settings.nodes {
            let name = self.fleet.fresh_name();
            self.fleet.start(&name)?;
        }
        let (figures, _) = self.measure(start, None, self.fleet.running()).await?;
        if self.settings.changes.contains(&Change::Cold) {
            report.add(
                Change::Cold,
                figures.with_min(self.settings.partitions as usize),
            );
        }
        if !self.settings.steady.is_zero() {
            report.add_steady(self.steady().await?);
        }
        for change in self.settings.changes.clone() {
            let figures = match change {
                Change::Cold => continue,
                Change::Crash => self.crash().await?,
                Change::Pause => self.pause().await?,
                Change::Leave => self.leave().await?,
                Change::Replace => self.replace().await?,
                Change::Join => self.join().await?,
                Change::Rolling => self.rolling().await?,
            };
            report.add(change, figures);
        }
        Ok(())
    }

    /// Measures the store load of the fleet at rest: every node scraped, the window waited
    /// out (failing if a node exits), every node scraped again.
    async fn steady(&mut self) -> anyhow::Result<SteadyFigures> {
        let window = self.settings.steady;
        let start = now_ns();
        let until = tokio::time::Instant::now() + window;
        let first = self.scrape_all().await;
        loop {
            self.fleet.check_running()?;
            let left = until.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                break;
            }
            tokio::time::sleep(left.min(Duration::from_millis(250))).await;
        }
        let second = self.scrape_all().await;
        let end = now_ns();
        let (events, _) = self.fleet.events()?;
        let changes = events
            .iter()
            .filter(|event| (start..=end).contains(&event.at))
            .count();
        Ok(SteadyFigures::compute(window, &first, &second, changes))
    }

    /// Every running node's counters, read at once; each scrape is bounded by
    /// [`steady::SCRAPE_TIMEOUT`].
    async fn scrape_all(&self) -> BTreeMap<String, Scrape> {
        let scrapes = self.fleet.running().into_iter().map(|node| {
            let address = self.fleet.metrics_address(&node);
            async move {
                let scrape = match address {
                    Some(address) => steady::scrape(&address).await,
                    None => Err("printed no metrics address".to_owned()),
                };
                (node, scrape)
            }
        });
        futures_util::future::join_all(scrapes)
            .await
            .into_iter()
            .collect()
    }

    fn victim(&self) -> anyhow::Result<String> {
        self.fleet
            .running()
            .into_iter()
            .next()
            .context("no node is running")
    }

    fn held_by(&self, node: &str, at: u128) -> anyhow::Result<usize> {
        let (events, _) = self.fleet.events()?;
        let counts = timeline::counts_at(&events, self.settings.partitions, at);
        Ok(counts.get(node).copied().unwrap_or(0))
    }

    async fn crash(&mut self) -> anyhow::Result<Figures> {
        let victim = self.victim()?;
        let start = self.fleet.kill(&victim).await?;
        let held = self.held_by(&victim, start - 1)?;
        let (figures, _) = self.measure(start, None, self.fleet.running()).await?;
        self.restore().await?;
        Ok(figures.with_min(held))
    }

    async fn pause(&mut self) -> anyhow::Result<Figures> {
        let victim = self.victim()?;
        let start = now_ns();
        self.fleet.signal(&victim, Signal::Stop)?;
        let held = self.held_by(&victim, start)?;
        tokio::time::sleep(self.settings.pause).await;
        let resumed = now_ns();
        self.fleet.signal(&victim, Signal::Cont)?;
        let (figures, settled) = self
            .measure(start, Some(resumed), self.fleet.running())
            .await?;
        let back = self.held_by(&victim, settled)?;
        Ok(figures.with_min(held + back))
    }

    async fn leave(&mut self) -> anyhow::Result<Figures> {
        let victim = self.victim()?;
        let start = now_ns();
        self.fleet.signal(&victim, Signal::Term)?;
        let held = self.held_by(&victim, start)?;
        let mut live = self.fleet.running();
        live.remove(&victim);
        let (figures, _) = self.measure(start, None, live).await?;
        self.fleet.wait_exit(&victim, self.settings.limit).await?;
        self.restore().await?;
        Ok(figures.with_min(held))
    }

    async fn replace(&mut self) -> anyhow::Result<Figures> {
        let victim = self.victim()?;
        let newcomer = self.fleet.fresh_name();
        let start = now_ns();
        self.fleet.signal(&victim, Signal::Term)?;
        self.fleet.start(&newcomer)?;
        let held = self.held_by(&victim, start)?;
        let mut live = self.fleet.running();
        live.remove(&victim);
        let (figures, _) = self.measure(start, None, live).await?;
        self.fleet.wait_exit(&victim, self.settings.limit).await?;
        Ok(figures.with_min(held))
    }

    async fn join(&mut self) -> anyhow::Result<Figures> {
        let newcomer = self.fleet.fresh_name();
        let start = now_ns();
        self.fleet.start(&newcomer)?;
        let (figures, settled) = self.measure(start, None, self.fleet.running()).await?;
        let share = self.held_by(&newcomer, settled)?;
        // Back to the fleet's size: the oldest node leaves.
        let victim = self.victim()?;
        self.fleet.signal(&victim, Signal::Term)?;
        let mut live = self.fleet.running();
        live.remove(&victim);
        self.settle(now_ns(), live).await?;
        self.fleet.wait_exit(&victim, self.settings.limit).await?;
        Ok(figures.with_min(share))
    }

    async fn rolling(&mut self) -> anyhow::Result<Figures> {
        let start = now_ns();
        let everyone = self.fleet.running();
        let mut fewest = 0;
        for node in &everyone {
            let stopping = now_ns();
            self.fleet.signal(node, Signal::Term)?;
            if self.settings.restart_in_place {
                // Its partitions wait for it: started again at once, it takes them back, and
                // nothing need move (the fewest moves stay 0).
                self.fleet.wait_exit(node, self.settings.limit).await?;
                self.fleet.start(node)?;
                self.settle(stopping, everyone.clone()).await?;
                continue;
            }
            fewest += self.held_by(node, stopping)?;
            self.fleet.wait_exit(node, self.settings.limit).await?;
            let mut live = everyone.clone();
            live.remove(node);
            self.settle(stopping, live).await?;
            self.fleet.start(node)?;
            let settled = self.settle(now_ns(), everyone.clone()).await?;
            fewest += self.held_by(node, settled)?;
        }
        let (figures, _) = self.measure(start, None, everyone).await?;
        Ok(figures.with_min(fewest))
    }

    /// Brings the fleet back to its size after a node went away: a new node joins.
    async fn restore(&mut self) -> anyhow::Result<()> {
        let name = self.fleet.fresh_name();
        let start = now_ns();
        self.fleet.start(&name)?;
        self.settle(start, self.fleet.running()).await?;
        Ok(())
    }

    /// Waits until the fleet has settled on `live` and stayed so for the quiet period,
    /// returning the instant it settled.
    async fn settle(&mut self, start: u128, live: BTreeSet<String>) -> anyhow::Result<u128> {
        let (_, settled) = self.measure(start, None, live).await?;
        Ok(settled)
    }

    /// Waits for the fleet to settle on `live` after a change begun at `start`, and
    /// computes the change's figures up to then.
    async fn measure(
        &mut self,
        start: u128,
        disruption_end: Option<u128>,
        live: BTreeSet<String>,
    ) -> anyhow::Result<(Figures, u128)> {
        let quiet = self.settings.quiet.as_nanos();
        let deadline = start + self.settings.limit.as_nanos();
        loop {
            self.fleet.check_running()?;
            let now = now_ns();
            let (events, _) = self.fleet.events()?;
            let window = Window {
                start,
                disruption_end,
                end: now,
                live: live.clone(),
            };
            if let Some(settled) = timeline::settled_at(&events, self.settings.partitions, &window)
            {
                if now.saturating_sub(settled) >= quiet {
                    let figures = timeline::figures(&events, self.settings.partitions, &window);
                    return Ok((figures, settled));
                }
            }
            if now > deadline {
                let figures = timeline::figures(&events, self.settings.partitions, &window);
                anyhow::bail!(
                    "the fleet did not settle on {} within {:?} ({} partitions interrupted, {} double owners)",
                    live.iter().cloned().collect::<Vec<_>>().join(", "),
                    self.settings.limit,
                    figures.interrupted,
                    figures.double_owners
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Figures {
    fn with_min(mut self, min_moves: usize) -> Figures {
        self.min_moves = min_moves;
        self
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::Command;

    fn settings(flags: &[&str]) -> anyhow::Result<Settings> {
        let cli = Cli::try_parse_from(["leasehold", "bench"].iter().chain(flags))?;
        let Command::Bench(args) = cli.command else {
            unreachable!("parsed as bench");
        };
        Settings::from_args(&args)
    }

    #[test]
    fn the_steady_window_is_off_or_at_least_a_heartbeat() {
        let off = settings(&[]).unwrap();
        assert!(off.steady.is_zero());
        assert!(!off
            .node_flags()
            .contains(&OsString::from("--metrics-listen")));
        let on = settings(&["--heartbeat", "1s", "--steady", "1s"]).unwrap();
        assert!(on
            .node_flags()
            .contains(&OsString::from("--metrics-listen")));
        let error = settings(&["--heartbeat", "1s", "--steady", "999ms"]).unwrap_err();
        assert!(error.to_string().contains("--steady"), "{error}");
    }

    #[test]
    fn the_lease_mode_is_per_partition_unless_asked() {
        assert_eq!(settings(&[]).unwrap().lease_mode, LeaseMode::PerPartition);
        let session = settings(&["--lease-mode", "session"]).unwrap();
        assert_eq!(session.lease_mode, LeaseMode::Session);
        assert!(settings(&["--lease-mode", "sessions"]).is_err());
    }
}
