//! `node`: one participant as a long-lived process, stopped gracefully by SIGTERM or SIGINT.
//!
//! Start-up runs in two steps: [`prepare`] checks everything that needs no store (flags,
//! URL, files) and fails at once, and [`Prepared::connect`] then reaches the store, trying
//! again with back-off for as long as the store is unreachable, so that a fleet restarted
//! together with its store waits for it instead of exiting.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use anyhow::Context;
use leasehold::admin::{self, AdminError};
use leasehold::metrics::{Metrics, Registry};
use leasehold::{
    Callbacks, Environment, LeaseGuard, Loss, NodeId, Participant, ParticipantConfig, PartitionId,
    SeededRng, StoreError, TimeoutStore,
};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;

use crate::append_log::{unix_ns, wall_time_of, AppendLog};
use crate::cli::{Cli, NodeArgs};
use crate::exclusions;
use crate::group_table::GroupTable;
use crate::http;
use crate::store_url::{self, StoreUrl};
use crate::work::Worker;
use crate::Outcome;

/// The first pause after a failed attempt to reach the store at start-up.
const FIRST_RETRY: Duration = Duration::from_millis(100);
/// The longest pause between attempts to reach the store at start-up.
const MAX_RETRY: Duration = Duration::from_secs(5);

/// Runs `node` until a termination signal, then releases its leases and returns.
pub async fn run(cli: &Cli, args: &NodeArgs) -> anyhow::Result<Outcome> {
    let prepared = prepare(cli, args, args.metrics_listen.is_some())?;
    let mut announcement = None;
    // Served before the store is reached: a supervisor sees the process alive while it waits.
    if let (Some(address), Some(registry)) = (&args.metrics_listen, &prepared.registry) {
        let (listener, bound) = http::bind(address, "metrics").await?;
        http::spawn(
            listener,
            http::metrics_routes(Arc::clone(registry)),
            "metrics",
        );
        announcement = Some(Announcement::new(format!(
            "metrics listening on http://{bound}/metrics"
        )));
    }
    let wait = StoreWait::default();
    let connecting = prepared.connect(cli, args, None, &wait);
    let connected = match &announcement {
        Some(announcement) => announcing(&wait, announcement, connecting).await?,
        None => connecting.await?,
    };
    let Some(mut started) = connected else {
        return Ok(Outcome::Success);
    };
    announcement.as_ref().map(Announcement::say).transpose()?;
    started.serve_until_signal(args).await?;
    started.stop().await;
    Ok(Outcome::Success)
}

/// A node whose flags, store URL and files passed every check that needs no store, with its
/// signal handlers installed: what is left is to reach the store and start.
pub struct Prepared {
    url: StoreUrl,
    excluded: BTreeSet<PartitionId>,
    fence_log: Option<AppendLog>,
    work_log: Option<AppendLog>,
    /// Where the participant's metrics are registered, when asked for; served before the
    /// participant exists, its families then empty.
    pub registry: Option<Arc<Registry>>,
    metrics: Option<Metrics>,
    signals: Signals,
}

/// A running node: its participant, the table it works on, and what runs beside it.
pub struct Started {
    /// The participant.
    pub participant: Participant,
    /// The store (each call time-limited) and group.
    pub table: GroupTable,
    /// The group's partition count.
    pub partitions: u32,
    worker: Option<Worker>,
    signals: Signals,
}

struct Signals {
    terminate: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> anyhow::Result<Signals> {
        Ok(Signals {
            terminate: signal(SignalKind::terminate()).context("cannot watch for SIGTERM")?,
            interrupt: signal(SignalKind::interrupt()).context("cannot watch for SIGINT")?,
            hangup: signal(SignalKind::hangup()).context("cannot watch for SIGHUP")?,
        })
    }

    /// Resolves with the name of the first SIGTERM or SIGINT. A SIGHUP meanwhile stays
    /// pending for [`Started::serve_until_signal`], which reloads the exclusions on it.
    async fn stop_requested(&mut self) -> &'static str {
        tokio::select! {
            _ = self.terminate.recv() => "SIGTERM",
            _ = self.interrupt.recv() => "SIGINT",
        }
    }
}

/// How the wait for the store at start-up is going, for whoever reports on it while it
/// lasts (the agent's `/readyz`).
#[derive(Debug)]
pub struct StoreWait {
    failures: watch::Sender<u64>,
    last_error: Mutex<Option<String>>,
}

impl Default for StoreWait {
    fn default() -> StoreWait {
        StoreWait {
            failures: watch::Sender::new(0),
            last_error: Mutex::default(),
        }
    }
}

impl StoreWait {
    /// Attempts to reach the store that failed so far.
    pub fn failures(&self) -> u64 {
        *self.failures.borrow()
    }

    /// Resolves once an attempt has failed.
    async fn failed(&self) {
        // The sender is `self`: it cannot close while this waits.
        let _ = self.failures.subscribe().wait_for(|&count| count > 0).await;
    }

    /// Why the latest attempt failed, with its causes, if one did.
    pub fn last_error(&self) -> Option<String> {
        self.last_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Counts a failed attempt; returns how many have failed so far.
    fn record(&self, error: &anyhow::Error) -> u64 {
        *self.last_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(format!("{error:#}"));
        self.failures.send_modify(|count| *count += 1);
        self.failures()
    }
}

/// The line on standard output that tells where a server of the process listens, printed
/// once. Scripts read it to find a port the system picked, and may use the server as soon
/// as it appears: so it is printed once the node is up, or, while the store cannot be
/// reached, at the first failed attempt (see [`announcing`]), so that the server can be
/// asked why.
#[derive(Debug)]
pub struct Announcement {
    line: String,
    said: AtomicBool,
}

impl Announcement {
    /// The announcement of `line`, not yet printed.
    pub fn new(line: String) -> Announcement {
        Announcement {
            line,
            said: AtomicBool::new(false),
        }
    }

    /// Prints the line, unless it was printed already.
    pub fn say(&self) -> anyhow::Result<()> {
        if self.said.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        crate::say(&self.line)
    }
}

/// Runs `work`, which reaches the store reporting failed attempts in `wait`, and makes
/// `announcement` at the first failure, if one comes before `work` ends.
pub async fn announcing<T>(
    wait: &StoreWait,
    announcement: &Announcement,
    work: impl Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    tokio::pin!(work);
    tokio::select! {
        result = &mut work => result,
        () = wait.failed() => {
            announcement.say()?;
            work.await
        }
    }
}

/// Checks everything about the node that needs no store — its timings (with a stand-in
/// partition count if none was given), the work options, the exclusion list, the store URL,
/// the log files — installs the signal handlers, and registers metrics if `metrics`. Every
/// failure here is final.
pub fn prepare(cli: &Cli, args: &NodeArgs, metrics: bool) -> anyhow::Result<Prepared> {
    let node = &args.id;
    if !args.unsafe_timings {
        configure(cli, args, args.partitions.unwrap_or(1))
            .validate()
            .with_context(|| format!("invalid configuration for node {node}"))?;
    }
    if args
        .work_interval
        .is_some_and(|interval| interval.is_zero())
    {
        anyhow::bail!("--work-interval must be greater than zero");
    }
    let excluded = exclusions::combined(args.exclude.as_deref(), args.exclude_file.as_deref())?;
    let url = cli.store_url()?;
    let fence_log = args.fence_log.as_deref().map(AppendLog::open).transpose()?;
    let work_log = args.work_log.as_deref().map(AppendLog::open).transpose()?;
    let signals = Signals::install()?;
    let (registry, metrics) = if metrics {
        let mut registry = Registry::default();
        let metrics = Metrics::register(&mut registry);
        (Some(Arc::new(registry)), Some(metrics))
    } else {
        (None, None)
    };
    Ok(Prepared {
        url,
        excluded,
        fence_log,
        work_log,
        registry,
        metrics,
        signals,
    })
}

impl Prepared {
    /// Opens the store, reads (or builds out) the group's partition count and starts the
    /// participant, with `extra` callbacks beside the fence log's. While the store cannot be
    /// reached, tries again with back-off, reporting each failure in the log and in `wait`;
    /// `None` if SIGTERM or SIGINT came first. Fails at once on what trying again cannot
    /// fix: a group that does not exist, a partition count that does not match it, an
    /// exclusion or timing that does not fit it, a store refusing the request.
    pub async fn connect(
        mut self,
        cli: &Cli,
        args: &NodeArgs,
        extra: Option<Arc<dyn Callbacks>>,
        wait: &StoreWait,
    ) -> anyhow::Result<Option<Started>> {
        let node = args.id.clone();
        let store_timeout = configure(cli, args, 1).store_timeout;
        let (url, requested) = (&self.url, args.partitions);
        let reached = retrying(&mut self.signals, wait, cli.timeout, || async move {
            let store = store_url::open(url, store_timeout.min(cli.timeout)).await?;
            let table = GroupTable {
                store: Arc::new(TimeoutStore::new(Arc::clone(&store), cli.timeout)),
                group: cli.group.clone(),
            };
            let partitions = partition_count(&table, requested).await?;
            anyhow::Ok((store, table, partitions))
        })
        .await?;
        let Some((store, table, partitions)) = reached else {
            return Ok(None);
        };
        if wait.failures() > 0 {
            tracing::info!(%node, store = %self.url, failed_attempts = wait.failures(), "store reached");
        }
        let mut config =
            configure(cli, args, partitions).with_excluded(self.excluded.iter().copied());
        config.negative_controls_mut().skip_group_check = args.unsafe_timings;
        if !args.unsafe_timings {
            config
                .validate()
                .with_context(|| format!("invalid configuration for node {node}"))?;
        }
        let drift = drift_clock(args.clock_rate)?;
        let recorder = Recorder {
            node: node.clone(),
            fence_log: self.fence_log,
            extra,
            drift,
        };
        tracing::info!(
            %node, group = %config.group, partitions, heartbeat = ?config.heartbeat,
            lease_validity = ?config.lease_validity, acquire_after = ?config.acquire_after,
            "node starting"
        );
        let environment = Environment {
            metrics: self.metrics,
            clock: match drift {
                Some(clock) => Arc::new(clock),
                None => Arc::new(leasehold::TokioClock),
            },
            ..Environment::default()
        };
        let participant = if args.unsafe_timings {
            tracing::warn!(%node, "starting with unchecked timings: two nodes may serve one partition at once");
            Participant::start_unchecked(store, config, std::sync::Arc::new(recorder), environment)
        } else {
            Participant::start_with(store, config, recorder, environment)
                .with_context(|| format!("invalid configuration for node {node}"))?
        };
        let worker = match (self.work_log, args.work_interval) {
            (Some(log), Some(interval)) => Some(Worker::start(
                participant.clone(),
                log,
                interval,
                args.work_duration,
            )),
            _ => None,
        };
        Ok(Some(Started {
            participant,
            table,
            partitions,
            worker,
            signals: self.signals,
        }))
    }
}

impl Started {
    /// Runs until SIGTERM or SIGINT, re-reading the exclusion file on SIGHUP. Fails if the
    /// lease loop stops by itself: nothing renews the leases any more, and the process should
    /// exit so that its supervisor restarts it.
    pub async fn serve_until_signal(&mut self, args: &NodeArgs) -> anyhow::Result<()> {
        let node = self.participant.node().clone();
        let signals = &mut self.signals;
        let signal_name = loop {
            tokio::select! {
                _ = signals.terminate.recv() => break "SIGTERM",
                _ = signals.interrupt.recv() => break "SIGINT",
                _ = signals.hangup.recv() => reload_exclusions(&self.participant, args),
                halt = self.participant.stopped() => match halt {
                    Some(halt) => anyhow::bail!("{halt}"),
                    None => anyhow::bail!("node {node}: the lease loop stopped unexpectedly"),
                },
            }
        };
        tracing::info!(%node, signal = signal_name, held = self.participant.owned().len(), "releasing leases and stopping");
        Ok(())
    }

    /// Runs `attempt` until it succeeds, trying again with back-off on store failures as
    /// [`Prepared::connect`] does; `None` if SIGTERM or SIGINT came first.
    pub async fn retry<T, F, Fut>(
        &mut self,
        limit: Duration,
        wait: &StoreWait,
        attempt: F,
    ) -> anyhow::Result<Option<T>>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = anyhow::Result<T>>,
    {
        retrying(&mut self.signals, wait, limit, attempt).await
    }

    /// Releases every lease once the work in flight under it has ended, and stops.
    pub async fn stop(self) {
        let node = self.participant.node().clone();
        match self.worker {
            // Units in flight finish under their permits while the leases are handed off.
            Some(worker) => {
                tokio::join!(worker.stop(), self.participant.shutdown());
            }
            None => self.participant.shutdown().await,
        }
        tracing::info!(%node, "stopped");
    }
}

/// Runs `attempt` until it succeeds or fails in a way that trying again cannot fix, pausing
/// after each transient failure as [`Backoff`] says and logging it; `None` as soon as
/// SIGTERM or SIGINT arrives, even in the middle of an attempt. An attempt running longer
/// than `call_limit` several times over counts as a timeout: each call in it has that limit,
/// and a connection that hangs must not silence the log.
async fn retrying<T, F, Fut>(
    signals: &mut Signals,
    wait: &StoreWait,
    call_limit: Duration,
    mut attempt: F,
) -> anyhow::Result<Option<T>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<T>>,
{
    let attempt_limit = call_limit.saturating_mul(4);
    let mut backoff = Backoff::new(SeededRng::from_entropy());
    loop {
        let bounded = tokio::time::timeout(attempt_limit, attempt());
        let error = tokio::select! {
            outcome = bounded => match outcome {
                Ok(Ok(value)) => return Ok(Some(value)),
                Ok(Err(error)) if is_transient(&error) => error,
                Ok(Err(error)) => return Err(error),
                Err(_) => anyhow::Error::new(StoreError::Timeout(attempt_limit))
                    .context("cannot reach the store"),
            },
            signal_name = signals.stop_requested() => return Ok(stopped_waiting(signal_name)),
        };
        let pause = backoff.next_pause();
        let failures = wait.record(&error);
        tracing::warn!(
            attempt = failures, error = format!("{error:#}"), retry_in = ?pause,
            "the store cannot be reached; trying again"
        );
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            signal_name = signals.stop_requested() => return Ok(stopped_waiting(signal_name)),
        }
    }
}

fn stopped_waiting<T>(signal_name: &str) -> Option<T> {
    tracing::info!(
        signal = signal_name,
        "stopping before the store was reached; nothing was held"
    );
    None
}

/// Whether `error` is a store failure that may pass with time ([`StoreError::is_transient`]:
/// unreachable, throttled, timed out), wherever it sits among the causes. Anything else —
/// a malformed URL, a missing variable, a group that does not exist, a schema this build
/// does not know, a request the store refuses — is final.
fn is_transient(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        // `AdminError::Store` is transparent: its store error never shows up as a cause.
        let store = match cause.downcast_ref::<AdminError>() {
            Some(AdminError::Store(store)) => Some(store),
            _ => cause.downcast_ref::<StoreError>(),
        };
        store.is_some_and(StoreError::is_transient)
    })
}

/// Capped exponential back-off with equal jitter: the ceiling starts at [`FIRST_RETRY`] and
/// doubles up to [`MAX_RETRY`], and each pause is drawn from its upper half, so that a fleet
/// restarted together spreads its attempts without any pause collapsing to nothing.
#[derive(Debug)]
struct Backoff {
    ceiling: Duration,
    rng: SeededRng,
}

impl Backoff {
    fn new(rng: SeededRng) -> Backoff {
        Backoff {
            ceiling: FIRST_RETRY,
            rng,
        }
    }

    fn next_pause(&mut self) -> Duration {
        let ceiling = self.ceiling;
        self.ceiling = ceiling.saturating_mul(2).min(MAX_RETRY);
        let half = ceiling / 2;
        let pause = half + half.mul_f64(self.rng.next_f64());
        // Whole milliseconds read better in the log, and nothing needs finer.
        Duration::from_millis(pause.as_millis() as u64)
    }
}

/// SIGHUP: reads `--exclude-file` again and adopts the list with `--exclude`'s. A list that
/// cannot be read or names partitions the group lacks leaves the current one in place: a
/// bad edit must not make a running node drop or take partitions.
fn reload_exclusions(participant: &Participant, args: &NodeArgs) {
    let Some(file) = &args.exclude_file else {
        tracing::info!("SIGHUP: no --exclude-file to read again");
        return;
    };
    let adopted = exclusions::combined(args.exclude.as_deref(), Some(file)).and_then(|list| {
        let count = list.len();
        participant.set_excluded(list)?;
        Ok(count)
    });
    match adopted {
        Ok(count) => {
            tracing::info!(file = %file.display(), excluded = count, "SIGHUP: exclusion list adopted")
        }
        Err(error) => {
            tracing::error!(file = %file.display(), error = format!("{error:#}"), "SIGHUP: exclusion list refused; keeping the previous one")
        }
    }
}

/// For fault tests, the clock leases are timed on when it is not real time: real time at
/// `rate`, from now.
fn drift_clock(rate: Option<f64>) -> anyhow::Result<Option<leasehold::DriftClock>> {
    let Some(rate) = rate else {
        return Ok(None);
    };
    anyhow::ensure!(
        rate.is_finite() && rate > 0.0,
        "--clock-rate = {rate} must be a positive number"
    );
    Ok(Some(leasehold::DriftClock::new(
        tokio::time::Instant::now(),
        rate,
    )))
}

/// The configuration from the defaults of [`ParticipantConfig::new`] and the flags given.
/// An unset store timeout is capped at the heartbeat, which it must not exceed.
fn configure(cli: &Cli, args: &NodeArgs, partitions: u32) -> ParticipantConfig {
    let mut config =
        ParticipantConfig::new(args.id.clone(), partitions).with_group(cli.group.clone());
    config.heartbeat = args.heartbeat.unwrap_or(config.heartbeat);
    config.lease_validity = args.validity.unwrap_or(config.lease_validity);
    config.acquire_after = args.acquire_after.unwrap_or(config.acquire_after);
    config.scan_interval = args.scan_interval.unwrap_or(config.scan_interval);
    config.store_timeout = args
        .store_timeout
        .unwrap_or(config.store_timeout.min(config.heartbeat));
    config.max_partitions_per_node = args
        .max_partitions_per_node
        .unwrap_or(config.max_partitions_per_node);
    config.weight = args.weight.unwrap_or(config.weight);
    config.capacity = args.capacity;
    config.max_load = args.max_load;
    config.load_band = args.load_band.unwrap_or(config.load_band);
    config.churn_budget = args.churn_budget.unwrap_or(config.churn_budget);
    config.churn_window = args.churn_window.unwrap_or(config.churn_window);
    config.forget_members_after = args
        .forget_members_after
        .unwrap_or(config.forget_members_after);
    config.relist_after = args.relist_after.unwrap_or(config.relist_after);
    config.drain_timeout = args.drain_timeout.unwrap_or(config.drain_timeout);
    config.advertise = args.advertise.clone();
    config.metadata = args.meta.iter().cloned().collect();
    config
}

/// The group's partition count: taken from the table, or, with `--partitions`, checked
/// against it. Records missing below `--partitions` are created only while the group is
/// unused (every record still at epoch 0), so that nodes started together on a new table
/// can each finish the build-out, but a group in use is never grown behind its users' back.
async fn partition_count(table: &GroupTable, requested: Option<u32>) -> anyhow::Result<u32> {
    let group = &table.group;
    let listing = table.leases().await?;
    let existing = listing.partition_count();
    let Some(partitions) = requested else {
        anyhow::ensure!(
            existing > 0,
            "group {group} does not exist; pass --partitions N to create it, or run init"
        );
        return Ok(existing);
    };
    if existing > partitions || (existing < partitions && existing > 0 && listing.in_use()) {
        anyhow::bail!(
            "group {group} has {existing} partitions, but --partitions {partitions} was given"
        );
    }
    if listing.len() < partitions as usize {
        let outcome = admin::init_listed(&*table.store, group, partitions, &listing).await?;
        tracing::info!(%group, created = outcome.created, "created lease records");
    }
    Ok(partitions)
}

/// Writes the fence log from the participant's notifications, and passes them on to the
/// callbacks of whatever runs the node (the agent's event stream).
struct Recorder {
    node: NodeId,
    fence_log: Option<AppendLog>,
    extra: Option<Arc<dyn Callbacks>>,
    /// The lease clock, when it is not real time: deadlines on it are mapped to real time
    /// before they are logged.
    drift: Option<leasehold::DriftClock>,
}

impl Callbacks for Recorder {
    // Every method passes on: one left to its default would silently drop what the agent's
    // callbacks answer (the loads its workers report).
    fn load(&self, partition: PartitionId) -> Option<f64> {
        self.extra.as_ref().and_then(|extra| extra.load(partition))
    }

    fn on_handing_off(&self, lease: &LeaseGuard) {
        if let Some(extra) = &self.extra {
            extra.on_handing_off(lease);
        }
    }

    fn on_acquired(&self, lease: &LeaseGuard) {
        if let Some(extra) = &self.extra {
            extra.on_acquired(lease);
        }
        if let Some(log) = &self.fence_log {
            let now = unix_ns(SystemTime::now());
            let (partition, epoch) = (lease.partition(), lease.epoch());
            log.append_or_warn(&format!(
                "{now} {} acquired {partition} {epoch}\n",
                self.node
            ));
        }
    }

    fn on_lost(&self, loss: &Loss) {
        if let Some(extra) = &self.extra {
            extra.on_lost(loss);
        }
        if let Some(log) = &self.fence_log {
            // For an expiry, `at` is the deadline: the moment serving stopped, which may be
            // well before this callback ran if the process was paused.
            let deadline = self.drift.map_or(loss.at, |clock| clock.to_true(loss.at));
            let at = unix_ns(wall_time_of(deadline));
            let word = loss.reason.as_str();
            let (partition, epoch) = (loss.partition, loss.epoch);
            log.append_or_warn(&format!("{at} {} {word} {partition} {epoch}\n", self.node));
        }
    }
}

#[cfg(test)]
mod tests {
    use leasehold::GroupName;

    use super::*;

    #[test]
    fn pauses_double_from_the_first_up_to_the_cap_each_within_the_upper_half_of_its_ceiling() {
        for seed in 0..64 {
            let mut backoff = Backoff::new(SeededRng::new(seed));
            let mut ceiling = FIRST_RETRY;
            for _ in 0..20 {
                let pause = backoff.next_pause();
                assert!(
                    pause >= ceiling / 2 && pause <= ceiling,
                    "seed {seed}: {pause:?} outside [{:?}, {ceiling:?}]",
                    ceiling / 2
                );
                ceiling = (ceiling * 2).min(MAX_RETRY);
            }
            assert_eq!(backoff.ceiling, MAX_RETRY, "seed {seed}");
        }
    }

    #[test]
    fn pauses_at_the_cap_are_spread_out() {
        let mut backoff = Backoff::new(SeededRng::new(7));
        let pauses: BTreeSet<Duration> = (0..30).map(|_| backoff.next_pause()).skip(10).collect();
        assert!(pauses.len() > 10, "{pauses:?}");
    }

    #[test]
    fn only_store_failures_that_may_pass_are_retried() {
        let unavailable = || StoreError::Unavailable {
            message: "connection refused".into(),
            source: None,
        };
        let group: GroupName = "g".parse().unwrap();
        let transient = [
            anyhow::Error::new(unavailable()).context("cannot open store zk://127.0.0.1:1/x"),
            anyhow::Error::new(StoreError::Timeout(Duration::from_secs(1))),
            anyhow::Error::new(AdminError::Store(StoreError::Throttled {
                message: "slow down".into(),
            })),
        ];
        for error in transient {
            assert!(is_transient(&error), "{error:#}");
        }
        let last = [
            anyhow::Error::new(StoreError::Invalid("schema version 9 is too new".into()))
                .context("cannot open store sqlite:x.db"),
            anyhow::Error::new(AdminError::NoSuchGroup(group)),
            anyhow::anyhow!("group g does not exist; pass --partitions N to create it"),
        ];
        for error in last {
            assert!(!is_transient(&error), "{error:#}");
        }
    }
}
