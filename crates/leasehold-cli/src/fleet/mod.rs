//! `fleet`: many participants in this one process against a real store, in real time, to
//! measure what a fleet of that size costs its store: calls and records per second, write
//! latency, scans and lease-table readings per node, leases lost, and the CPU and memory of
//! this process and of the store's server when it runs on this machine.
//!
//! Every participant starts at once, as after a fleet-wide restart, so the first window is
//! the start-up (until every partition is owned); the second is the settled fleet. The
//! group is built for the run and deleted afterwards; a group with records is refused.

mod counting;
mod report;
mod server;
mod usage;

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use leasehold::admin::{self, Destroy};
use leasehold::{
    Callbacks, GroupRecord, LeaseStore, Loss, LossReason, NodeId, Participant, ParticipantConfig,
    TimeoutStore,
};
use leasehold_process::store_url;

use crate::cli::{Cli, FleetArgs};
use crate::group_table::GroupTable;
use crate::Outcome;
use counting::{Counters, CountingStore};
use report::{FleetReport, Window};

/// How often the fleet is looked at while it runs.
const POLL: Duration = Duration::from_millis(100);

/// Leases lost other than by handing them off, by reason, and the leases held now.
#[derive(Debug, Default)]
struct Losses {
    expired: AtomicU64,
    conflict: AtomicU64,
    changed: AtomicU64,
    /// Acquisitions less losses of every kind, hand-offs included: what the fleet holds,
    /// counted without reading every participant's leases at every look.
    held: AtomicI64,
}

impl Callbacks for Losses {
    fn on_acquired(&self, _: &leasehold::LeaseGuard) {
        self.held.fetch_add(1, Ordering::Relaxed);
    }

    fn on_lost(&self, loss: &Loss) {
        self.held.fetch_sub(1, Ordering::Relaxed);
        let counter = match loss.reason {
            LossReason::Expired => &self.expired,
            LossReason::Conflict => &self.conflict,
            LossReason::Changed => &self.changed,
            _ => return,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// Runs `fleet`; exits 1 if a lease was lost or some partition was never owned.
pub async fn run(cli: &Cli, args: &FleetArgs) -> anyhow::Result<Outcome> {
    anyhow::ensure!(args.nodes > 0, "--nodes must be at least 1");
    anyhow::ensure!(args.partitions > 0, "--partitions must be at least 1");
    anyhow::ensure!(
        !args.duration.is_zero(),
        "--duration must be more than zero"
    );
    let configs: Vec<ParticipantConfig> = (0..args.nodes)
        .map(|index| configure(cli, args, index))
        .collect::<anyhow::Result<_>>()?;
    configs[0].validate().context("invalid node timings")?;

    let url = cli.store_url()?;
    // A store private to one client (memory:) cannot be opened twice and shared.
    let clients = if url.is_shared() {
        args.clients
            .unwrap_or(args.nodes.div_ceil(16))
            .clamp(1, args.nodes)
    } else {
        1
    };
    let mut stores: Vec<Arc<dyn LeaseStore>> = Vec::new();
    for _ in 0..clients {
        stores.push(store_url::open(&url, cli.timeout).await?);
    }
    let table = GroupTable {
        store: Arc::new(TimeoutStore::new(Arc::clone(&stores[0]), cli.timeout)),
        group: cli.group.clone(),
    };
    crate::bench::refuse_group_in_use(&table).await?;
    let template = GroupRecord {
        lease_mode: args.lease_mode,
        ..GroupRecord::default()
    };
    admin::ensure_group_as(&*table.store, &table.group, &template).await?;
    let built = admin::init(&*table.store, &table.group, args.partitions).await?;

    let store_text = cli.store.clone().unwrap_or_default();
    let server_counts = server::ServerCounts::open(&url, &store_text).await;
    let server_reading = || async {
        match &server_counts {
            Some(counts) => counts.read().await,
            None => None,
        }
    };
    let counters = Arc::new(Counters::default());
    let losses = Arc::new(Losses::default());
    let (own_before, server_before) = (usage::own(), server_usage(args));
    let before = counters.snapshot();
    let rows_before = server_reading().await;
    let started = Instant::now();
    let mut participants = Vec::with_capacity(configs.len());
    for (index, config) in configs.into_iter().enumerate() {
        let store = Arc::clone(&stores[index % stores.len()]);
        let counted: Arc<dyn LeaseStore> =
            Arc::new(CountingStore::new(store, Arc::clone(&counters)));
        participants.push(Participant::start(counted, config, Arc::clone(&losses))?);
    }

    let mut owned_after = None;
    let mut at_ownership = before;
    let mut rows_at_ownership = None;
    while started.elapsed() < args.duration {
        tokio::time::sleep(POLL).await;
        // The count may run ahead while a loss is yet to be reported (a taker's acquisition
        // before the expiry its predecessor has not noticed), so the leases themselves
        // confirm it.
        let held = losses.held.load(Ordering::Relaxed);
        if owned_after.is_none() && held >= i64::from(args.partitions) {
            let owned: usize = participants.iter().map(|p| p.owned().len()).sum();
            if owned == args.partitions as usize {
                owned_after = Some(started.elapsed());
                at_ownership = counters.snapshot();
                rows_at_ownership = server_reading().await;
            }
        }
    }
    let ran = started.elapsed();
    let at_end = counters.snapshot();
    let rows_at_end = server_reading().await;
    let (own_after, server_after) = (usage::own(), server_usage(args));
    let scans: u64 = participants.iter().map(|p| p.status().scans).sum();
    let readings: u64 = participants.iter().map(|p| p.status().lease_listings).sum();
    let mut listings_started = std::collections::BTreeMap::new();
    let mut scans_started = std::collections::BTreeMap::new();
    for participant in &participants {
        let status = participant.status();
        for (cause, count) in status.listings_started {
            *listings_started.entry(cause.name().to_owned()).or_insert(0) += count;
        }
        for (cause, count) in status.scans_started {
            *scans_started.entry(cause.name().to_owned()).or_insert(0) += count;
        }
    }
    let owned_at_end: usize = participants.iter().map(|p| p.owned().len()).sum();

    futures_util::future::join_all(participants.iter().map(Participant::shutdown)).await;
    admin::destroy(&*table.store, &table.group, Destroy::Force)
        .await
        .with_context(|| format!("cannot delete the group {} after the run", table.group))?;

    let settled = owned_after.map(|after| Window {
        seconds: (ran - after).as_secs_f64(),
        counts: at_end.since(at_ownership),
    });
    let server_counts_seen = match (rows_before, rows_at_end) {
        (Some(first), Some(last)) => {
            let whole = last.rate_since(&first, ran.as_secs_f64());
            let settled = rows_at_ownership
                .zip(owned_after)
                .map(|(at, after)| last.rate_since(&at, (ran - after).as_secs_f64()));
            Some((whole, settled))
        }
        _ => None,
    };
    let report = FleetReport {
        nodes: args.nodes,
        partitions: args.partitions,
        lease_mode: args.lease_mode.as_str().to_owned(),
        store: url.to_string(),
        clients,
        seconds: ran.as_secs_f64(),
        every_partition_owned_after: owned_after.map(|d| d.as_secs_f64()),
        held_by_nobody: built.held_by_nobody,
        owned_at_end,
        whole_run: Window {
            seconds: ran.as_secs_f64(),
            counts: at_end.since(before),
        },
        settled,
        server_counts: server_counts_seen,
        write_latency_ms: counters.write_latency().map(millis),
        member_write_latency_ms: counters.member_write_latency().map(millis),
        failed_member_writes: counters.failed_member_writes(),
        scans_per_node: scans as f64 / f64::from(args.nodes),
        lease_readings_per_node: readings as f64 / f64::from(args.nodes),
        listings_started,
        scans_started,
        leases_lost: [
            losses.expired.load(Ordering::Relaxed),
            losses.conflict.load(Ordering::Relaxed),
            losses.changed.load(Ordering::Relaxed),
        ],
        fleet_process: usage::Usage {
            cpu_seconds: own_after.cpu_seconds - own_before.cpu_seconds,
            ..own_after
        },
        server: args.server_process.as_ref().map(|name| {
            (
                name.clone(),
                usage::Usage {
                    cpu_seconds: server_after.cpu_seconds - server_before.cpu_seconds,
                    ..server_after
                },
            )
        }),
    };
    report.print(args.json)?;
    Ok(if report.healthy() {
        Outcome::Success
    } else {
        Outcome::ProblemsFound
    })
}

/// A median and a 99th percentile, in milliseconds.
fn millis((p50, p99): (Duration, Duration)) -> [f64; 2] {
    [p50.as_secs_f64() * 1e3, p99.as_secs_f64() * 1e3]
}

fn server_usage(args: &FleetArgs) -> usage::Usage {
    args.server_process
        .as_deref()
        .map(usage::named)
        .unwrap_or_default()
}

/// Participant `index`'s configuration: the library's defaults, and the timings given.
fn configure(cli: &Cli, args: &FleetArgs, index: u32) -> anyhow::Result<ParticipantConfig> {
    let node = NodeId::new(format!("fleet-{index}"))?;
    let mut config = ParticipantConfig::new(node, args.partitions).with_group(cli.group.clone());
    config.heartbeat = args.heartbeat.unwrap_or(config.heartbeat);
    config.lease_validity = args.validity.unwrap_or(config.lease_validity);
    config.acquire_after = args.acquire_after.unwrap_or(config.acquire_after);
    config.scan_interval = args.scan_interval.unwrap_or(config.scan_interval);
    config.relist_after = args.relist_after.unwrap_or(config.relist_after);
    config.store_timeout = args
        .store_timeout
        .unwrap_or(config.store_timeout.min(config.heartbeat));
    Ok(config)
}
