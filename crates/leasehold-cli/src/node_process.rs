//! The process a node's flags describe, for `node` and `agent` alike: its configuration,
//! the fence and work logs, the exclusion list re-read on SIGHUP, the clock of the fault
//! tests, all handed to [`leasehold_process::Process`], which runs the life cycle.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::Context;
use leasehold::{
    Callbacks, Environment, GroupName, LeaseGuard, Loss, NodeId, Participant, ParticipantConfig,
    PartitionId,
};
use leasehold_process::{CountMismatch, Process, Running};

use crate::announce::{announcing, Announcement};
use crate::append_log::{unix_ns, wall_time_of, AppendLog};
use crate::cli::{Cli, NodeArgs};
use crate::exclusions;
use crate::work::Worker;

/// The worker a node's flags ask for (`--work-log` and `--work-interval`), to start once
/// the node runs.
pub struct Work {
    log: Option<AppendLog>,
    interval: Option<Duration>,
    duration: Option<Duration>,
}

/// Checks everything about the node that needs no store — its timings (with a stand-in
/// partition count if none was given), the work options, the exclusion list, the store URL,
/// the log files — and builds its process, passing the participant's notifications on to
/// `extra` too. With `only`, every other partition is excluded. Every failure here is final.
pub fn prepare(
    cli: &Cli,
    args: &NodeArgs,
    only: Option<BTreeSet<PartitionId>>,
    extra: Option<Arc<dyn Callbacks>>,
) -> anyhow::Result<(Process, Work)> {
    let node = &args.id;
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
    let drift = drift_clock(args.clock_rate)?;
    let config_for = {
        let (group, args, only) = (cli.group.clone(), args.clone(), only.clone());
        move |partitions| {
            let excluded = beyond(excluded.clone(), only.as_ref(), partitions);
            configure(&group, &args, partitions).with_excluded(excluded)
        }
    };
    let config = config_for(args.partitions.unwrap_or(1));
    let recorder = Recorder {
        node: node.clone(),
        fence_log,
        extra,
        drift,
    };
    let environment = Environment {
        clock: match drift {
            Some(clock) => Arc::new(clock),
            None => Arc::new(leasehold::TokioClock),
        },
        ..Environment::default()
    };
    let reload_args = (args.exclude.clone(), args.exclude_file.clone());
    let mut process = Process::from_url(url, config)
        .store_call_limit(cli.timeout)
        .restart_in_place(args.restart_in_place)
        .environment(environment)
        .callbacks(recorder)
        .on_reload(move |participant| {
            reload_exclusions(
                participant,
                &reload_args.0,
                reload_args.1.as_deref(),
                only.as_ref(),
            )
        });
    process = match args.partitions {
        Some(_) => process.create_records(),
        None => process.partitions_from_table(config_for),
    };
    if args.unsafe_timings {
        process = process.unchecked_timings();
    } else {
        process
            .check()
            .with_context(|| format!("invalid configuration for node {node}"))?;
    }
    let work = Work {
        log: work_log,
        interval: args.work_interval,
        duration: args.work_duration,
    };
    Ok((process, work))
}

/// Starts the process: serves its metrics if `--metrics-listen` asks (before the store is
/// reached, so that a supervisor sees it alive while it waits), reaches the store and joins.
/// `None` if a stop was asked for meanwhile.
pub async fn start(mut process: Process, args: &NodeArgs) -> anyhow::Result<Option<Running>> {
    let mut announcement = None;
    if let Some(address) = &args.metrics_listen {
        let bound = process.serve_metrics(address).await?;
        announcement = Some(Announcement::new(format!(
            "metrics listening on http://{bound}/metrics"
        )));
    }
    let wait = process.store_wait();
    let starting = process.start();
    let started = match &announcement {
        Some(announcement) => announcing(&wait, announcement, starting).await,
        None => starting.await,
    }
    .map_err(explain)?;
    if started.is_some() {
        announcement.as_ref().map(Announcement::say).transpose()?;
    }
    Ok(started)
}

/// Says what was wrong with a node's start in the words of its flags: a partition count the
/// group does not have names `--partitions`.
pub fn explain(error: anyhow::Error) -> anyhow::Error {
    match error.downcast_ref::<CountMismatch>() {
        Some(CountMismatch::NoSuchGroup(group)) => anyhow::anyhow!(
            "group {group} does not exist; pass --partitions N to create it, or run init"
        ),
        Some(CountMismatch::Differs {
            group,
            existing,
            asked,
        }) => anyhow::anyhow!(
            "group {group} has {existing} partitions, but --partitions {asked} was given"
        ),
        _ => error,
    }
}

/// What runs beside a started node: the worker, if the flags asked for one.
pub struct Beside(Option<Worker>);

impl Work {
    /// Starts the worker on `running`'s participant, if the flags ask for one.
    pub fn start(self, running: &Running) -> Beside {
        match (self.log, self.interval) {
            (Some(log), Some(interval)) => Beside(Some(Worker::start(
                running.participant().clone(),
                log,
                interval,
                self.duration,
            ))),
            _ => Beside(None),
        }
    }
}

/// Hands the node's partitions off and stops: units in flight finish under their permits
/// while the leases are handed off.
pub async fn stop(running: Running, beside: Beside) {
    match beside.0 {
        Some(worker) => {
            tokio::join!(worker.stop(), running.stop());
        }
        None => running.stop().await,
    }
}

/// SIGHUP: reads `--exclude-file` again and adopts the list with `--exclude`'s. A list that
/// cannot be read or names partitions the group lacks leaves the current one in place: a
/// bad edit must not make a running node drop or take partitions.
fn reload_exclusions(
    participant: &Participant,
    exclude: &Option<String>,
    file: Option<&std::path::Path>,
    only: Option<&BTreeSet<PartitionId>>,
) {
    let Some(file) = file else {
        tracing::info!("SIGHUP: no --exclude-file to read again");
        return;
    };
    let adopted = exclusions::combined(exclude.as_deref(), Some(file)).and_then(|list| {
        let count = list.len();
        participant.set_excluded(beyond(list, only, participant.partitions()))?;
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

/// `excluded`, plus every partition of `0..partitions` not in `only` when it is given.
fn beyond(
    mut excluded: BTreeSet<PartitionId>,
    only: Option<&BTreeSet<PartitionId>>,
    partitions: u32,
) -> BTreeSet<PartitionId> {
    if let Some(only) = only {
        excluded.extend(
            (0..partitions)
                .map(PartitionId)
                .filter(|partition| !only.contains(partition)),
        );
    }
    excluded
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
pub fn configure(group: &GroupName, args: &NodeArgs, partitions: u32) -> ParticipantConfig {
    let mut config = ParticipantConfig::new(args.id.clone(), partitions).with_group(group.clone());
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
    config.max_acquires_per_scan = args
        .max_acquires_per_scan
        .unwrap_or(config.max_acquires_per_scan);
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
