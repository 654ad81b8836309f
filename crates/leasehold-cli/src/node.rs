//! `node`: one participant as a long-lived process, stopped gracefully by SIGTERM or SIGINT.

use std::sync::Arc;
use std::time::SystemTime;

use anyhow::Context;
use leasehold::metrics::{Metrics, Registry};
use leasehold::{
    admin, Callbacks, Environment, LeaseGuard, Loss, LossReason, NodeId, Participant,
    ParticipantConfig, TimeoutStore,
};
use tokio::signal::unix::{signal, SignalKind};

use crate::admin_commands::GroupTable;
use crate::append_log::{unix_ns, wall_time_of, AppendLog};
use crate::cli::{Cli, NodeArgs};
use crate::exclusions;
use crate::http;
use crate::store_url;
use crate::work::Worker;
use crate::Outcome;

/// Runs `node` until a termination signal, then releases its leases and returns.
pub async fn run(cli: &Cli, args: &NodeArgs) -> anyhow::Result<Outcome> {
    let metrics = args.metrics_listen.is_some();
    let mut started = start(cli, args, metrics, None).await?;
    if let (Some(address), Some(registry)) = (&args.metrics_listen, &started.registry) {
        let (listener, bound) = http::bind(address, "metrics").await?;
        http::spawn(
            listener,
            http::metrics_routes(Arc::clone(registry)),
            "metrics",
        );
        crate::say(&format!("metrics listening on http://{bound}/metrics"))?;
    }
    started.serve_until_signal(args).await?;
    started.stop().await;
    Ok(Outcome::Success)
}

/// A running node: its participant, the table it works on, and what runs beside it.
pub struct Started {
    /// The participant.
    pub participant: Participant,
    /// The store (each call time-limited) and group.
    pub table: GroupTable,
    /// The group's partition count.
    pub partitions: u32,
    /// Where the participant's metrics are registered, when asked for.
    pub registry: Option<Arc<Registry>>,
    worker: Option<Worker>,
    signals: Signals,
}

struct Signals {
    terminate: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

/// Validates the flags, opens the store and starts the participant, with `extra` callbacks
/// beside the fence log's, and metrics in a registry of its own if `metrics`.
pub async fn start(
    cli: &Cli,
    args: &NodeArgs,
    metrics: bool,
    extra: Option<Arc<dyn Callbacks>>,
) -> anyhow::Result<Started> {
    let node = args.id.clone();
    // Check the timings before touching the store, with a stand-in count if none was given.
    configure(cli, args, args.partitions.unwrap_or(1))
        .validate()
        .with_context(|| format!("invalid configuration for node {node}"))?;
    if args
        .work_interval
        .is_some_and(|interval| interval.is_zero())
    {
        anyhow::bail!("--work-interval must be greater than zero");
    }
    let excluded = exclusions::combined(args.exclude.as_deref(), args.exclude_file.as_deref())?;
    let store_timeout = configure(cli, args, 1).store_timeout;
    let store = store_url::open(&cli.store_url()?, store_timeout.min(cli.timeout)).await?;
    let table = GroupTable {
        store: Arc::new(TimeoutStore::new(Arc::clone(&store), cli.timeout)),
        group: cli.group.clone(),
    };
    let partitions = partition_count(&table, args.partitions).await?;
    let config = configure(cli, args, partitions).with_excluded(excluded.iter().copied());
    config
        .validate()
        .with_context(|| format!("invalid configuration for node {node}"))?;
    let recorder = Recorder {
        node: node.clone(),
        fence_log: args.fence_log.as_deref().map(AppendLog::open).transpose()?,
        extra,
    };
    let work_log = args.work_log.as_deref().map(AppendLog::open).transpose()?;
    let signals = Signals {
        terminate: signal(SignalKind::terminate()).context("cannot watch for SIGTERM")?,
        interrupt: signal(SignalKind::interrupt()).context("cannot watch for SIGINT")?,
        hangup: signal(SignalKind::hangup()).context("cannot watch for SIGHUP")?,
    };

    tracing::info!(
        %node, group = %config.group, partitions, heartbeat = ?config.heartbeat,
        lease_validity = ?config.lease_validity, acquire_after = ?config.acquire_after,
        "node starting"
    );
    let mut environment = Environment::default();
    let registry = metrics.then(|| {
        let mut registry = Registry::default();
        environment.metrics = Some(Metrics::register(&mut registry));
        Arc::new(registry)
    });
    let participant = Participant::start_with(store, config, recorder, environment)
        .with_context(|| format!("invalid configuration for node {node}"))?;
    let worker = match (work_log, args.work_interval) {
        (Some(log), Some(interval)) => Some(Worker::start(
            participant.clone(),
            log,
            interval,
            args.work_duration,
        )),
        _ => None,
    };
    Ok(Started {
        participant,
        table,
        partitions,
        registry,
        worker,
        signals,
    })
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
                _ = self.participant.stopped() => match self.participant.refusal() {
                    Some(refusal) => anyhow::bail!("{refusal}"),
                    None => anyhow::bail!("node {node}: the lease loop stopped unexpectedly"),
                },
            }
        };
        tracing::info!(%node, signal = signal_name, held = self.participant.owned().len(), "releasing leases and stopping");
        Ok(())
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
}

impl Callbacks for Recorder {
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
            let at = unix_ns(wall_time_of(loss.at));
            let word = match loss.reason {
                LossReason::Released => "released",
                LossReason::Expired => "expired",
                LossReason::Conflict => "conflict",
                LossReason::Stopped => "stopped",
            };
            let (partition, epoch) = (loss.partition, loss.epoch);
            log.append_or_warn(&format!("{at} {} {word} {partition} {epoch}\n", self.node));
        }
    }
}
