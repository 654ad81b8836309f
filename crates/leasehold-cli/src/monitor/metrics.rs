//! The monitor's `/metrics`: the table's health, computed from the latest reading at each
//! scrape, so a scrape never sees half of one reading and half of the next.
//!
//! Every series carries the label `group`. Their meanings: docs/metrics.md.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

use super::state::{MEMBER_KINDS, OWNERSHIP_KINDS};
use super::App;

/// Encodes the monitor's figures at each scrape.
#[derive(Debug)]
pub(super) struct Health {
    app: Arc<App>,
}

impl Health {
    pub(super) fn new(app: Arc<App>) -> Health {
        Health { app }
    }
}

/// Writes one family whose series differ by one more label (or by none, with `None`).
fn family<V: Copy>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    kind: MetricType,
    group: &str,
    series: &[(Option<(&str, &str)>, V)],
    write: impl Fn(V, prometheus_client::encoding::MetricEncoder) -> Result<(), std::fmt::Error>,
) -> Result<(), std::fmt::Error> {
    let mut metric = encoder.encode_descriptor(name, help, None, kind)?;
    for (label, value) in series {
        let labels: Vec<(&str, &str)> = std::iter::once(("group", group))
            .chain(label.iter().copied())
            .collect();
        write(*value, metric.encode_family(&labels)?)?;
    }
    Ok(())
}

fn gauge(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    group: &str,
    series: &[(Option<(&str, &str)>, f64)],
) -> Result<(), std::fmt::Error> {
    family(
        encoder,
        name,
        help,
        MetricType::Gauge,
        group,
        series,
        |v, e| ConstGauge::new(v).encode(e),
    )
}

fn counter(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    group: &str,
    series: &[(Option<(&str, &str)>, u64)],
) -> Result<(), std::fmt::Error> {
    family(
        encoder,
        name,
        help,
        MetricType::Counter,
        group,
        series,
        |v, e| ConstCounter::new(v).encode(e),
    )
}

impl Collector for Health {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let app = &self.app;
        let group = app.group.as_str();
        let e = &mut encoder;
        let one = |v: f64| [(None, v)];
        let ok = app.reads_ok.load(Ordering::Relaxed);
        let failed = app.reads_failed.load(Ordering::Relaxed);
        let tracker = app.tracker();
        let up = f64::from(u8::from(ok > 0 && !tracker.failing()));
        gauge(
            e,
            "leasehold_monitor_up",
            "1 if the latest read of the table succeeded",
            group,
            &one(up),
        )?;
        counter(
            e,
            "leasehold_monitor_reads",
            "Reads of the table, by result",
            group,
            &[
                (Some(("result", "ok")), ok),
                (Some(("result", "error")), failed),
            ],
        )?;
        let age = app
            .last_read_age()
            .map_or(f64::INFINITY, |age| age.as_secs_f64());
        gauge(
            e,
            "leasehold_monitor_last_read_age_seconds",
            "Seconds since the latest successful read; +Inf before the first",
            group,
            &one(age),
        )?;
        if ok == 0 {
            // Nothing read yet: no figures to give, and zeros would read as healthy.
            return Ok(());
        }
        let s = tracker.summary();
        let n = |v: u64| v as f64;
        gauge(
            e,
            "leasehold_monitor_partitions_expected",
            "The group's partition count",
            group,
            &one(f64::from(tracker.expected())),
        )?;
        gauge(
            e,
            "leasehold_monitor_partitions",
            "Lease records by state",
            group,
            &[
                (Some(("state", "held")), n(s.held)),
                (Some(("state", "released")), n(s.released)),
                (Some(("state", "offline")), n(s.offline)),
            ],
        )?;
        gauge(
            e,
            "leasehold_monitor_partitions_unowned",
            "Partitions released, or held with no owner",
            group,
            &one(n(s.unowned)),
        )?;
        gauge(
            e,
            "leasehold_monitor_partitions_missing",
            "Partitions below the count with no record",
            group,
            &one(n(s.missing)),
        )?;
        gauge(
            e,
            "leasehold_monitor_leases_unrenewed",
            "Held records not renewed within --stale-after",
            group,
            &one(n(s.unrenewed)),
        )?;
        gauge(
            e,
            "leasehold_monitor_oldest_unrenewed_lease_seconds",
            "The longest any held record has gone without a renewal",
            group,
            &one(s.oldest_unrenewed_s),
        )?;
        gauge(
            e,
            "leasehold_monitor_members",
            "Member records: live (changed within --stale-after), dead, draining",
            group,
            &[
                (Some(("state", "live")), n(s.live_members)),
                (Some(("state", "dead")), n(s.dead_members)),
                (Some(("state", "draining")), n(s.draining_members)),
            ],
        )?;
        let held: Vec<(String, u32)> = tracker
            .held_per_member()
            .map(|(node, held)| (node.to_string(), held))
            .collect();
        let per_member: Vec<(Option<(&str, &str)>, f64)> = held
            .iter()
            .map(|(node, held)| (Some(("node", node.as_str())), f64::from(*held)))
            .collect();
        gauge(
            e,
            "leasehold_monitor_member_partitions",
            "Partitions held per member",
            group,
            &per_member,
        )?;
        gauge(
            e,
            "leasehold_monitor_prohibited_pairs",
            "Prohibitions of a node from a partition",
            group,
            &one(n(s.prohibited_pairs)),
        )?;
        gauge(
            e,
            "leasehold_monitor_partitions_reserved",
            "Released partitions reserved for a node restarting in place",
            group,
            &one(n(s.reserved)),
        )?;
        gauge(
            e,
            "leasehold_monitor_reservations_run_out",
            "Partitions still reserved for a restarting node twice the restart window after the monitor first saw them",
            group,
            &one(n(s.reservations_run_out)),
        )?;
        gauge(
            e,
            "leasehold_monitor_spillover_partitions",
            "Unowned partitions that no live, non-draining, permitted member below its cap can take",
            group,
            &one(n(s.spillover)),
        )?;
        gauge(
            e,
            "leasehold_monitor_load_spillover",
            "Load live members carry above their max_load",
            group,
            &one(s.load_spillover),
        )?;
        gauge(
            e,
            "leasehold_monitor_corrupt_records",
            "Unreadable lease and member records",
            group,
            &one(n(s.corrupt)),
        )?;
        counter(
            e,
            "leasehold_monitor_epochs_back",
            "Partitions seen with an epoch lower than at the read before, summed over every read",
            group,
            &[(None, tracker.epochs_back_total)],
        )?;
        let ownership: Vec<(Option<(&str, &str)>, u64)> = OWNERSHIP_KINDS
            .iter()
            .zip(tracker.ownership_counts)
            .map(|(kind, count)| (Some(("kind", *kind)), count))
            .collect();
        counter(
            e,
            "leasehold_monitor_ownership_changes",
            "Lease changes seen between reads, by kind",
            group,
            &ownership,
        )?;
        let members: Vec<(Option<(&str, &str)>, u64)> = MEMBER_KINDS
            .iter()
            .zip(tracker.member_counts)
            .map(|(kind, count)| (Some(("kind", *kind)), count))
            .collect();
        counter(
            e,
            "leasehold_monitor_member_changes",
            "Member changes seen between reads, by kind",
            group,
            &members,
        )
    }
}
