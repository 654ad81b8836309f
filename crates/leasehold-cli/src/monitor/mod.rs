//! `monitor`: an operator process that reads a group's table without joining it, and
//! serves what it sees: a live map of the fleet in the browser, the table's health as
//! Prometheus metrics, and the same data as JSON and as a stream of changes.
//!
//! One task reads the table every `--interval` (sooner after a change notice, where the
//! store has them) and folds each reading into a [`state::Tracker`]; the HTTP handlers only
//! read what it built. A store outage leaves the last map in place, marked with the error,
//! and `leasehold_monitor_up` at 0.

mod metrics;
mod server;
mod state;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::signal::unix::{signal, SignalKind};

use anyhow::Context;
use leasehold::{unix_ms_now, Change, ChangeFeed, GroupName, LeaseState, LeaseStore, StoreError};
use tokio::sync::broadcast;
use tokio::time::Instant;

use crate::cli::{Cli, MonitorArgs};
use crate::cross_site::Guard;
use crate::group_table::GroupTable;
use crate::stream_slots::StreamSlots;
use crate::Outcome;
use state::{Reading, Tracker};

/// Messages kept for event streams that fall behind; one further behind gets the whole map
/// again.
const STREAM_BACKLOG: usize = 256;
/// Event streams served at once: each holds a connection and a task.
const MAX_STREAMS: usize = 64;
/// Event streams served at once to one address: a few pages open on one machine.
const MAX_STREAMS_PER_PEER: usize = 8;
/// The shortest gap between reads that change notices can cause.
const MIN_NOTICE_GAP: Duration = Duration::from_millis(100);
/// The shortest interval accepted: every read lists the whole table.
const MIN_INTERVAL: Duration = Duration::from_millis(50);

/// What goes out on the event streams.
#[derive(Debug)]
enum Item {
    /// The whole map (the partition count changed).
    Map { sequence: u64 },
    /// What one read changed.
    Delta { sequence: u64, json: String },
    /// One change.
    Change { id: u64, json: String },
    /// A successful read that changed nothing, so that a page can say how fresh its map is.
    Read { unix_ms: u64 },
}

/// Everything the handlers share with the reader.
#[derive(Debug)]
struct App {
    group: GroupName,
    store: Arc<dyn LeaseStore>,
    tracker: RwLock<Tracker>,
    /// The map's JSON, built at most once per sequence.
    map_json: Mutex<Option<(u64, Arc<str>)>>,
    events: broadcast::Sender<Arc<Item>>,
    streams: Arc<StreamSlots>,
    token: Option<String>,
    reads_ok: AtomicU64,
    reads_failed: AtomicU64,
    last_ok: Mutex<Option<Instant>>,
}

impl App {
    fn tracker(&self) -> std::sync::RwLockReadGuard<'_, Tracker> {
        self.tracker.read().unwrap_or_else(|e| e.into_inner())
    }

    /// The map as JSON with its sequence and the latest change id it includes.
    fn map(&self) -> (u64, u64, Arc<str>) {
        let tracker = self.tracker();
        let sequence = tracker.sequence();
        let last_change = tracker.last_change_id();
        let mut cached = self.map_json.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, json)) = cached.as_ref() {
            if *at == sequence {
                return (sequence, last_change, Arc::clone(json));
            }
        }
        let json: Arc<str> = serde_json::to_string(&tracker.map())
            .unwrap_or_else(|error| format!(r#"{{"error":"cannot encode the map: {error}"}}"#))
            .into();
        *cached = Some((sequence, Arc::clone(&json)));
        (sequence, last_change, json)
    }

    fn last_read_age(&self) -> Option<Duration> {
        let last = *self.last_ok.lock().unwrap_or_else(|e| e.into_inner());
        last.map(|at| at.elapsed())
    }
}

/// Runs `monitor` until SIGTERM or SIGINT.
pub async fn run(cli: &Cli, args: &MonitorArgs) -> anyhow::Result<Outcome> {
    if args.interval < MIN_INTERVAL {
        anyhow::bail!(
            "--interval {:?} is too short: every read lists the whole table (at least {:?})",
            args.interval,
            MIN_INTERVAL
        );
    }
    if args.stale_after <= args.interval {
        anyhow::bail!(
            "--stale-after {:?} must be longer than --interval {:?}",
            args.stale_after,
            args.interval
        );
    }
    let token = args
        .token_file
        .as_deref()
        .map(crate::http::read_token)
        .transpose()?;
    // SIGHUP, which would end the process by default, changes nothing here: watched from
    // the start, and logged.
    let mut hangup = signal(SignalKind::hangup()).context("cannot watch for SIGHUP")?;
    // Under a supervisor, a monitor started before its store waits for it rather than
    // exiting into a restart loop.
    let Some(table) = GroupTable::open_waiting(cli).await? else {
        return Ok(Outcome::Success);
    };
    let (listener, bound) = crate::http::bind(&args.listen, "the monitor").await?;
    let (events, _) = broadcast::channel(STREAM_BACKLOG);
    let app = Arc::new(App {
        group: table.group.clone(),
        store: Arc::clone(&table.store),
        tracker: RwLock::new(Tracker::new(
            table.group.as_str(),
            args.interval,
            args.stale_after,
            token.is_some(),
        )),
        map_json: Mutex::new(None),
        events,
        streams: StreamSlots::new(MAX_STREAMS, MAX_STREAMS_PER_PEER),
        token,
        reads_ok: AtomicU64::new(0),
        reads_failed: AtomicU64::new(0),
        last_ok: Mutex::new(None),
    });
    let mut registry = leasehold::metrics::Registry::default();
    registry.register_collector(Box::new(metrics::Health::new(Arc::clone(&app))));
    let serving = leasehold_process::serve::ServeMetrics::register(&mut registry);
    let guard = Guard {
        has_token: app.token.is_some(),
        loopback: bound.ip().is_loopback(),
    };
    crate::http::spawn(
        listener,
        server::routes(Arc::clone(&app), Arc::new(registry)),
        guard,
        "monitor",
        serving,
    );
    crate::say(&format!("listening on http://{bound}/"))?;
    tracing::info!(group = %app.group, %bound, "monitor started");

    let reader = tokio::spawn(read_forever(
        Arc::clone(&app),
        args.interval,
        args.partitions,
    ));
    let mut terminate = signal(SignalKind::terminate()).context("cannot watch for SIGTERM")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("cannot watch for SIGINT")?;
    loop {
        tokio::select! {
            _ = terminate.recv() => break,
            _ = interrupt.recv() => break,
            _ = hangup.recv() => tracing::info!("SIGHUP: the monitor has nothing to reload"),
        }
    }
    reader.abort();
    Ok(Outcome::Success)
}

async fn read_forever(app: Arc<App>, interval: Duration, expected: Option<u32>) {
    let mut feed = match app.store.watch(&app.group).await {
        Ok(feed) => Some(feed),
        Err(StoreError::NotSupported(_)) => None,
        Err(error) => {
            tracing::warn!(%error, "change notices unavailable; reading every interval");
            None
        }
    };
    loop {
        let started = Instant::now();
        read_once(&app, expected).await;
        let next = started + interval;
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(next) => break,
                notice = next_notice(&mut feed) => match notice {
                    None => feed = None,
                    Some(change) if routine(&change) => {}
                    Some(_) => {
                        // Coalesces a burst of notices into one read.
                        tokio::time::sleep_until((started + MIN_NOTICE_GAP).min(next)).await;
                        break;
                    }
                },
            }
        }
    }
}

/// Whether a notice can wait for the next read: a lease written held (every renewal, as
/// well as a take) or a member's heartbeat. A fleet sends them every heartbeat, and reading
/// the whole table for each would cost the store far more than the map gains; releases,
/// operator changes and members joining or leaving are read at once.
fn routine(change: &Change) -> bool {
    matches!(
        change,
        Change::LeaseWritten {
            state: LeaseState::Held,
            ..
        } | Change::MemberUpdated(_)
    )
}

async fn next_notice(feed: &mut Option<ChangeFeed>) -> Option<Change> {
    match feed {
        Some(feed) => feed.next().await,
        None => std::future::pending().await,
    }
}

async fn read_once(app: &App, expected: Option<u32>) {
    let reading = async {
        let group = app.store.get_group(&app.group).await?.map(|g| g.value);
        let lease_mode = group.as_ref().map(|g| g.lease_mode).unwrap_or_default();
        let restart_window = group.as_ref().and_then(|g| g.known_restart_window());
        let leases = app.store.list_leases(&app.group).await?;
        let members = app.store.list_members(&app.group).await?;
        Ok::<_, StoreError>(Reading {
            lease_mode,
            restart_window,
            expected: expected.unwrap_or(0),
            leases,
            members,
            at: Instant::now(),
            unix_ms: unix_ms_now(),
        })
    }
    .await;
    let mut outgoing = Vec::new();
    {
        let mut tracker = app.tracker.write().unwrap_or_else(|e| e.into_inner());
        match reading {
            Ok(reading) => {
                app.reads_ok.fetch_add(1, Ordering::Relaxed);
                *app.last_ok.lock().unwrap_or_else(|e| e.into_inner()) = Some(reading.at);
                let update = tracker.apply(reading);
                if !update.changed {
                    outgoing.push(Item::Read {
                        unix_ms: unix_ms_now(),
                    });
                }
                if update.changed {
                    let sequence = tracker.sequence();
                    outgoing.push(if update.reshaped {
                        Item::Map { sequence }
                    } else {
                        Item::Delta {
                            sequence,
                            json: to_json(&tracker.delta(&update.partitions)),
                        }
                    });
                }
                for change in &update.changes {
                    outgoing.push(Item::Change {
                        id: change.id,
                        json: to_json(change),
                    });
                }
            }
            Err(error) => {
                app.reads_failed.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(group = %app.group, %error, "cannot read the table");
                if tracker.read_failed(error.to_string()) {
                    outgoing.push(Item::Delta {
                        sequence: tracker.sequence(),
                        json: to_json(&tracker.delta(&[])),
                    });
                }
            }
        }
    }
    for item in outgoing {
        // No subscriber is not an error: nobody has the page open.
        let _ = app.events.send(Arc::new(item));
    }
}

fn to_json(value: &impl serde::Serialize) -> String {
    serde_json::to_string(value).unwrap_or_else(|error| format!(r#"{{"error":"{error}"}}"#))
}
