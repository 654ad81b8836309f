//! Prometheus metrics of participants: what they hold, what they lose and why, and how the
//! store answers them.
//!
//! Metrics are kept with [`prometheus_client`], not the `metrics` facade: a [`Metrics`] is
//! registered in a [`Registry`] the application owns, with no global recorder, so a process
//! that runs several participants (or a test that runs many fleets) keeps them apart by
//! their `group` and `node` labels, and a participant given no `Metrics` pays nothing. The
//! crate is small (no exporter, TLS stack or HTTP server of its own) and writes the
//! OpenMetrics text format that Prometheus scrapes.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap().block_on(async {
//! use std::sync::Arc;
//! use std::time::Duration;
//! use leasehold::metrics::{Metrics, Registry};
//! use leasehold::{admin, Environment, MemoryStore, NodeId, Participant, ParticipantConfig};
//!
//! let mut registry = Registry::default();
//! let metrics = Metrics::register(&mut registry);
//!
//! let store = Arc::new(MemoryStore::new());
//! let config = ParticipantConfig::fast(NodeId::new("server-1").unwrap(), 4);
//! admin::init(&*store, &config.group, 4).await.unwrap();
//! let environment = Environment { metrics: Some(metrics), ..Environment::default() };
//! let participant = Participant::start_with(store, config, (), environment).unwrap();
//! tokio::time::sleep(Duration::from_secs(1)).await;
//!
//! let text = leasehold::metrics::encode(&registry);
//! assert!(text.contains(r#"leasehold_leases_held{group="default",node="server-1"} 4"#));
//! participant.shutdown().await;
//! # });
//! ```
//!
//! Every series carries the labels `group` and `node`:
//!
//! | name | type | more labels | what it counts |
//! | --- | --- | --- | --- |
//! | `leasehold_leases_held` | gauge | | leases held, those being handed off included |
//! | `leasehold_leases_target` | gauge | | partitions the node aims to hold |
//! | `leasehold_leases_handing_off` | gauge | | leases waiting for their work to end before release |
//! | `leasehold_draining` | gauge | | 1 while an operator has the node draining |
//! | `leasehold_live_members` | gauge | | members counted live at the last decision, the node included |
//! | `leasehold_lease_acquisitions_total` | counter | | leases taken |
//! | `leasehold_lease_releases_total` | counter | | leases written released (hand-offs) |
//! | `leasehold_sessions_ended_total` | counter | | with session leases: sessions that ended under the node (its member record deleted, or written by another process), each dropping every lease it held |
//! | `leasehold_lease_losses_total` | counter | `reason`: expired, conflict, released, stopped, changed | leases the node stopped serving |
//! | `leasehold_renewal_batch_size` | histogram | | leases per renewal batch |
//! | `leasehold_renewal_batch_duration_seconds` | histogram | | a renewal batch's store call, read-back included |
//! | `leasehold_renewals_total` | counter | `result`: renewed, conflict, error | renewals of single leases |
//! | `leasehold_store_call_duration_seconds` | histogram | `operation` | every store call, time-outs included |
//! | `leasehold_store_errors_total` | counter | `operation`, `kind` | failed store calls, each failed write of a batch and each unreadable record of a listing |
//! | `leasehold_scans_total` | counter | | scans completed |
//! | `leasehold_scan_failures_total` | counter | | scans that failed (the store did not answer) |
//! | `leasehold_scan_backoff_level` | gauge | | scans failed in a row; the interval doubles with each |
//! | `leasehold_lease_listings_total` | counter | | scans that read the lease table |
//! | `leasehold_lease_listings_started_total` | counter | `reason`: every_scan, read_failed, start, write_failed, lost_race, notice, holding_changed, unsettled, membership, operator, periodic, missed_heartbeat, rows | scans that set out to read the lease table, by why ([`ListingCause`](crate::planner::ListingCause)), failed ones included |
//! | `leasehold_lease_rows_read_total` | counter | | lease records those listings returned |
//! | `leasehold_lease_row_reads_total` | counter | | lease records read one by one, named by change notices, instead of a listing |
//! | `leasehold_lease_deadline_seconds` | gauge | | time left to the nearest deadline of a lease held, `+Inf` with none |
//! | `leasehold_corrupt_records` | gauge | `record`: lease, member | unreadable records in the latest listing |
//! | `leasehold_callback_panics_total` | counter | `callback` | application callbacks that panicked (contained) |
//! | `leasehold_callbacks_slow_total` | counter | `callback` | callbacks that ran longer than a tenth of the heartbeat, delaying the lease loop |
//!
//! Store error kinds: `conflict`, `already_exists`, `not_found`, `unavailable`, `throttled`,
//! `timeout`, `corrupt`, `not_supported`, `invalid`. Operations: the methods of
//! [`LeaseStore`](crate::LeaseStore) (`list_leases`, `put_leases`, `put_member`, …).
//!
//! Gauges of what the node holds are set by its lease loop each time it acts (at least
//! every heartbeat), so a scrape sees them as of that moment.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
pub use prometheus_client::registry::Registry;

use crate::error::StoreError;
use crate::types::LossReason;
use crate::types::{GroupName, NodeId};

mod encode;
mod metered;
pub use encode::{encode, encode_text, CONTENT_TYPE, TEXT_CONTENT_TYPE};
pub(crate) use metered::MeteredStore;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NodeLabels {
    group: String,
    node: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabels {
    group: String,
    node: String,
    reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    group: String,
    node: String,
    result: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperationLabels {
    group: String,
    node: String,
    operation: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    group: String,
    node: String,
    operation: &'static str,
    kind: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RecordLabels {
    group: String,
    node: String,
    record: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallbackLabels {
    group: String,
    node: String,
    callback: &'static str,
}

type FloatGauge = Gauge<f64, AtomicU64>;
type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// Seconds from half a millisecond to about 16 s: store round trips on loopback to calls
/// that hit the store time-out.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

/// Leases per batch, 1 to 65,536.
fn size_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1.0, 2.0, 17))
}

/// The metric families of every participant given this handle, registered once in a
/// [`Registry`]. Cheap to clone; pass it to participants through
/// [`Environment::metrics`](crate::Environment::metrics). See the [module](self) for the
/// list.
#[derive(Debug, Clone)]
pub struct Metrics {
    families: Arc<Families>,
}

#[derive(Debug)]
struct Families {
    held: Family<NodeLabels, Gauge>,
    target: Family<NodeLabels, Gauge>,
    handing_off: Family<NodeLabels, Gauge>,
    draining: Family<NodeLabels, Gauge>,
    live_members: Family<NodeLabels, Gauge>,
    acquisitions: Family<NodeLabels, Counter>,
    releases: Family<NodeLabels, Counter>,
    sessions_ended: Family<NodeLabels, Counter>,
    losses: Family<ReasonLabels, Counter>,
    renewal_batch_size: HistogramFamily<NodeLabels>,
    renewal_batch_duration: HistogramFamily<NodeLabels>,
    renewals: Family<ResultLabels, Counter>,
    store_calls: HistogramFamily<OperationLabels>,
    store_errors: Family<ErrorLabels, Counter>,
    scans: Family<NodeLabels, Counter>,
    scan_failures: Family<NodeLabels, Counter>,
    scan_backoff: Family<NodeLabels, Gauge>,
    lease_listings: Family<NodeLabels, Counter>,
    listings_started: Family<ReasonLabels, Counter>,
    lease_rows: Family<NodeLabels, Counter>,
    lease_row_reads: Family<NodeLabels, Counter>,
    deadline: Family<NodeLabels, FloatGauge>,
    corrupt: Family<RecordLabels, Gauge>,
    callback_panics: Family<CallbackLabels, Counter>,
    callbacks_slow: Family<CallbackLabels, Counter>,
    load: Family<NodeLabels, FloatGauge>,
    fair_load: Family<NodeLabels, FloatGauge>,
    load_spillover: Family<NodeLabels, FloatGauge>,
    load_moves: Family<NodeLabels, Counter>,
}

impl Metrics {
    /// Creates the families and registers them in `registry`, each named with the
    /// `leasehold_` prefix. Register once per registry: two registrations would write every
    /// name twice.
    pub fn register(registry: &mut Registry) -> Metrics {
        let families = Families {
            held: Family::default(),
            target: Family::default(),
            handing_off: Family::default(),
            draining: Family::default(),
            live_members: Family::default(),
            acquisitions: Family::default(),
            releases: Family::default(),
            sessions_ended: Family::default(),
            losses: Family::default(),
            renewal_batch_size: Family::new_with_constructor(size_histogram),
            renewal_batch_duration: Family::new_with_constructor(latency_histogram),
            renewals: Family::default(),
            store_calls: Family::new_with_constructor(latency_histogram),
            store_errors: Family::default(),
            scans: Family::default(),
            scan_failures: Family::default(),
            scan_backoff: Family::default(),
            lease_listings: Family::default(),
            listings_started: Family::default(),
            lease_rows: Family::default(),
            lease_row_reads: Family::default(),
            deadline: Family::default(),
            corrupt: Family::default(),
            callback_panics: Family::default(),
            callbacks_slow: Family::default(),
            load: Family::default(),
            fair_load: Family::default(),
            load_spillover: Family::default(),
            load_moves: Family::default(),
        };
        let f = &families;
        let r = registry.sub_registry_with_prefix("leasehold");
        r.register(
            "leases_held",
            "Leases held, those being handed off included",
            f.held.clone(),
        );
        r.register(
            "leases_target",
            "Partitions this node aims to hold",
            f.target.clone(),
        );
        r.register(
            "leases_handing_off",
            "Leases waiting for the work under them to end before release",
            f.handing_off.clone(),
        );
        r.register(
            "draining",
            "1 while an operator has this node draining",
            f.draining.clone(),
        );
        r.register(
            "live_members",
            "Members counted live at the last decision, this node included",
            f.live_members.clone(),
        );
        r.register("lease_acquisitions", "Leases taken", f.acquisitions.clone());
        r.register(
            "load",
            "The load of the partitions this node keeps, as the application reports it",
            f.load.clone(),
        );
        r.register(
            "load_fair_share",
            "This node's fair share of the group's load, by capacity",
            f.fair_load.clone(),
        );
        r.register(
            "load_spillover",
            "Load above max_load that no member had room for",
            f.load_spillover.clone(),
        );
        r.register(
            "load_moves",
            "Partitions handed off to balance load, counted against the churn budget",
            f.load_moves.clone(),
        );
        r.register(
            "lease_releases",
            "Leases written released (hand-offs)",
            f.releases.clone(),
        );
        r.register(
            "sessions_ended",
            "With session leases: sessions that ended under this node, each dropping every lease it held",
            f.sessions_ended.clone(),
        );
        r.register(
            "lease_losses",
            "Leases this node stopped serving, by reason: expired, conflict, released, stopped",
            f.losses.clone(),
        );
        r.register(
            "renewal_batch_size",
            "Leases per renewal batch",
            f.renewal_batch_size.clone(),
        );
        r.register(
            "renewal_batch_duration_seconds",
            "Time of a renewal batch's store call, read-back included",
            f.renewal_batch_duration.clone(),
        );
        r.register(
            "renewals",
            "Renewals of single leases, by result: renewed, conflict, error",
            f.renewals.clone(),
        );
        r.register(
            "store_call_duration_seconds",
            "Store calls by operation, time-outs included",
            f.store_calls.clone(),
        );
        r.register(
            "store_errors",
            "Failed store calls, failed writes of batches and unreadable records, by operation and kind",
            f.store_errors.clone(),
        );
        r.register("scans", "Scans completed", f.scans.clone());
        r.register(
            "scan_failures",
            "Scans that failed",
            f.scan_failures.clone(),
        );
        r.register(
            "scan_backoff_level",
            "Scans failed in a row; the scan interval doubles with each",
            f.scan_backoff.clone(),
        );
        r.register(
            "lease_listings",
            "Scans that read the lease table",
            f.lease_listings.clone(),
        );
        r.register(
            "lease_listings_started",
            "Scans that set out to read the lease table, by why, failed ones included",
            f.listings_started.clone(),
        );
        r.register(
            "lease_rows_read",
            "Lease records read by listings",
            f.lease_rows.clone(),
        );
        r.register(
            "lease_row_reads",
            "Lease records read one by one, named by change notices, instead of a listing",
            f.lease_row_reads.clone(),
        );
        r.register(
            "lease_deadline_seconds",
            "Time left to the nearest deadline of a lease held; +Inf with none",
            f.deadline.clone(),
        );
        r.register(
            "corrupt_records",
            "Unreadable records in the latest listing, by record: lease, member",
            f.corrupt.clone(),
        );
        r.register(
            "callback_panics",
            "Application callbacks that panicked",
            f.callback_panics.clone(),
        );
        r.register(
            "callbacks_slow",
            "Application callbacks that ran longer than a tenth of the heartbeat",
            f.callbacks_slow.clone(),
        );
        Metrics {
            families: Arc::new(families),
        }
    }

    /// The series of one node, resolved once so that recording is an atomic operation.
    pub(crate) fn node(&self, group: &GroupName, node: &NodeId) -> NodeMetrics {
        let labels = NodeLabels {
            group: group.to_string(),
            node: node.to_string(),
        };
        let f = &self.families;
        let reason = |reason: LossReason| {
            f.losses.get_or_create_owned(&ReasonLabels {
                group: labels.group.clone(),
                node: labels.node.clone(),
                reason: reason.as_str(),
            })
        };
        let result = |result: &'static str| {
            f.renewals.get_or_create_owned(&ResultLabels {
                group: labels.group.clone(),
                node: labels.node.clone(),
                result,
            })
        };
        let record = |record: &'static str| {
            f.corrupt.get_or_create_owned(&RecordLabels {
                group: labels.group.clone(),
                node: labels.node.clone(),
                record,
            })
        };
        let deadline = f.deadline.get_or_create_owned(&labels);
        deadline.set(f64::INFINITY);
        // Counters that alerts take rates of start at zero, so that the first error counts
        // as an increase rather than the appearance of a series.
        for callback in CALLBACKS {
            let labels = CallbackLabels {
                group: labels.group.clone(),
                node: labels.node.clone(),
                callback,
            };
            f.callback_panics.get_or_create_owned(&labels);
            f.callbacks_slow.get_or_create_owned(&labels);
        }
        for operation in [
            StoreOperation::ListLeases,
            StoreOperation::ListMembers,
            StoreOperation::PutLeases,
            StoreOperation::PutMember,
        ] {
            for kind in ["conflict", "unavailable", "throttled", "timeout"] {
                f.store_errors.get_or_create_owned(&ErrorLabels {
                    group: labels.group.clone(),
                    node: labels.node.clone(),
                    operation: operation.as_str(),
                    kind,
                });
            }
        }
        NodeMetrics {
            held: f.held.get_or_create_owned(&labels),
            target: f.target.get_or_create_owned(&labels),
            handing_off: f.handing_off.get_or_create_owned(&labels),
            draining: f.draining.get_or_create_owned(&labels),
            live_members: f.live_members.get_or_create_owned(&labels),
            acquisitions: f.acquisitions.get_or_create_owned(&labels),
            releases: f.releases.get_or_create_owned(&labels),
            sessions_ended: f.sessions_ended.get_or_create_owned(&labels),
            load: f.load.get_or_create_owned(&labels),
            fair_load: f.fair_load.get_or_create_owned(&labels),
            load_spillover: f.load_spillover.get_or_create_owned(&labels),
            load_moves: f.load_moves.get_or_create_owned(&labels),
            losses: [
                reason(LossReason::Expired),
                reason(LossReason::Conflict),
                reason(LossReason::Released),
                reason(LossReason::Stopped),
                reason(LossReason::Changed),
            ],
            renewal_batch_size: f.renewal_batch_size.get_or_create_owned(&labels),
            renewal_batch_duration: f.renewal_batch_duration.get_or_create_owned(&labels),
            renewals: [result("renewed"), result("conflict"), result("error")],
            scans: f.scans.get_or_create_owned(&labels),
            scan_failures: f.scan_failures.get_or_create_owned(&labels),
            scan_backoff: f.scan_backoff.get_or_create_owned(&labels),
            lease_listings: f.lease_listings.get_or_create_owned(&labels),
            lease_rows: f.lease_rows.get_or_create_owned(&labels),
            lease_row_reads: f.lease_row_reads.get_or_create_owned(&labels),
            deadline,
            corrupt: [record("lease"), record("member")],
            store_calls: StoreOperation::ALL.map(|operation| {
                f.store_calls.get_or_create_owned(&OperationLabels {
                    group: labels.group.clone(),
                    node: labels.node.clone(),
                    operation: operation.as_str(),
                })
            }),
            families: Arc::clone(&self.families),
            labels,
        }
    }
}

/// The application callbacks a participant runs, as metric labels.
const CALLBACKS: [&str; 4] = ["on_acquired", "on_handing_off", "on_lost", "load"];

/// The operations of [`LeaseStore`](crate::LeaseStore), as metric labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StoreOperation {
    ListLeases,
    GetLease,
    GetLeases,
    PutLease,
    PutLeases,
    DeleteLease,
    DeleteLeases,
    Transact,
    ListMembers,
    GetMember,
    PutMember,
    DeleteMember,
    GetGroup,
    PutGroup,
    Watch,
}

impl StoreOperation {
    const ALL: [StoreOperation; 15] = [
        StoreOperation::ListLeases,
        StoreOperation::GetLease,
        StoreOperation::GetLeases,
        StoreOperation::PutLease,
        StoreOperation::PutLeases,
        StoreOperation::DeleteLease,
        StoreOperation::DeleteLeases,
        StoreOperation::Transact,
        StoreOperation::ListMembers,
        StoreOperation::GetMember,
        StoreOperation::PutMember,
        StoreOperation::DeleteMember,
        StoreOperation::GetGroup,
        StoreOperation::PutGroup,
        StoreOperation::Watch,
    ];

    fn as_str(self) -> &'static str {
        match self {
            StoreOperation::ListLeases => "list_leases",
            StoreOperation::GetLease => "get_lease",
            StoreOperation::GetLeases => "get_leases",
            StoreOperation::PutLease => "put_lease",
            StoreOperation::PutLeases => "put_leases",
            StoreOperation::DeleteLease => "delete_lease",
            StoreOperation::DeleteLeases => "delete_leases",
            StoreOperation::Transact => "transact",
            StoreOperation::ListMembers => "list_members",
            StoreOperation::GetMember => "get_member",
            StoreOperation::PutMember => "put_member",
            StoreOperation::DeleteMember => "delete_member",
            StoreOperation::GetGroup => "get_group",
            StoreOperation::PutGroup => "put_group",
            StoreOperation::Watch => "watch",
        }
    }
}

/// The label value of a store error's kind.
pub(crate) fn error_kind(error: &StoreError) -> &'static str {
    match error {
        StoreError::Conflict { .. } => "conflict",
        StoreError::AlreadyExists { .. } => "already_exists",
        StoreError::NotFound { .. } => "not_found",
        StoreError::Unavailable { .. } => "unavailable",
        StoreError::Throttled { .. } => "throttled",
        StoreError::Timeout(_) => "timeout",
        StoreError::Corrupt { .. } => "corrupt",
        StoreError::NotSupported(_) => "not_supported",
        StoreError::Invalid(_) => "invalid",
    }
}

/// One node's series.
#[derive(Debug)]
pub(crate) struct NodeMetrics {
    pub(crate) held: Gauge,
    pub(crate) target: Gauge,
    pub(crate) handing_off: Gauge,
    pub(crate) draining: Gauge,
    pub(crate) live_members: Gauge,
    pub(crate) acquisitions: Counter,
    pub(crate) releases: Counter,
    pub(crate) sessions_ended: Counter,
    pub(crate) load: FloatGauge,
    pub(crate) fair_load: FloatGauge,
    pub(crate) load_spillover: FloatGauge,
    pub(crate) load_moves: Counter,
    losses: [Counter; 5],
    pub(crate) renewal_batch_size: Histogram,
    pub(crate) renewal_batch_duration: Histogram,
    renewals: [Counter; 3],
    pub(crate) scans: Counter,
    pub(crate) scan_failures: Counter,
    pub(crate) scan_backoff: Gauge,
    pub(crate) lease_listings: Counter,
    pub(crate) lease_rows: Counter,
    pub(crate) lease_row_reads: Counter,
    pub(crate) deadline: FloatGauge,
    corrupt: [Gauge; 2],
    store_calls: [Histogram; StoreOperation::ALL.len()],
    families: Arc<Families>,
    labels: NodeLabels,
}

/// How a single lease's renewal came out.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Renewal {
    Renewed,
    Conflict,
    Error,
}

impl NodeMetrics {
    pub(crate) fn lost(&self, reason: LossReason) {
        let index = match reason {
            LossReason::Expired => 0,
            LossReason::Conflict => 1,
            LossReason::Released => 2,
            LossReason::Stopped => 3,
            LossReason::Changed => 4,
        };
        self.losses[index].inc();
    }

    pub(crate) fn renewed(&self, outcome: Renewal) {
        self.renewals[outcome as usize].inc();
    }

    /// Sets the count of unreadable records of the latest listing.
    pub(crate) fn corrupt(&self, members: bool, count: usize) {
        self.corrupt[usize::from(members)].set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    pub(crate) fn store_call(&self, operation: StoreOperation, took: Duration) {
        let index = StoreOperation::ALL
            .iter()
            .position(|o| *o == operation)
            .unwrap_or(0);
        self.store_calls[index].observe(took.as_secs_f64());
    }

    pub(crate) fn store_error(&self, operation: StoreOperation, error: &StoreError) {
        self.families
            .store_errors
            .get_or_create(&ErrorLabels {
                group: self.labels.group.clone(),
                node: self.labels.node.clone(),
                operation: operation.as_str(),
                kind: error_kind(error),
            })
            .inc();
    }

    /// A scan set out to read the lease table, for `cause`. Created at the first listing
    /// of each cause, so a node shows only the causes it has met.
    pub(crate) fn listing_started(&self, cause: crate::planner::ListingCause) {
        self.families
            .listings_started
            .get_or_create(&ReasonLabels {
                group: self.labels.group.clone(),
                node: self.labels.node.clone(),
                reason: cause.name(),
            })
            .inc();
    }

    pub(crate) fn callback_panicked(&self, callback: &'static str) {
        self.families
            .callback_panics
            .get_or_create(&self.callback_labels(callback))
            .inc();
    }

    pub(crate) fn callback_slow(&self, callback: &'static str) {
        self.families
            .callbacks_slow
            .get_or_create(&self.callback_labels(callback))
            .inc();
    }

    fn callback_labels(&self, callback: &'static str) -> CallbackLabels {
        CallbackLabels {
            group: self.labels.group.clone(),
            node: self.labels.node.clone(),
            callback,
        }
    }
}

/// Sets a gauge from a count.
pub(crate) fn set_count(gauge: &Gauge, count: usize) {
    gauge.set(i64::try_from(count).unwrap_or(i64::MAX));
}
