//! What `fleet` reports, as text for a person or one JSON document.

use serde::Serialize;

use super::counting::Snapshot;
use super::server::ServerRates;
use super::usage::Usage;

/// The store calls of one stretch of the run.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Window {
    /// How long it lasted.
    pub seconds: f64,
    /// What the participants asked of the store meanwhile.
    pub counts: Snapshot,
}

impl Window {
    fn per_second(&self, count: u64) -> f64 {
        if self.seconds > 0.0 {
            count as f64 / self.seconds
        } else {
            0.0
        }
    }

    fn line(&self, what: &str) -> String {
        let c = &self.counts;
        format!(
            "{what} ({:.1} s): {:.1} write calls/s carrying {:.1} records/s, {:.1} read calls/s \
             returning {:.1} records/s, {} calls failed",
            self.seconds,
            self.per_second(c.write_calls),
            self.per_second(c.records_written),
            self.per_second(c.read_calls),
            self.per_second(c.records_read),
            c.failed_calls
        )
    }

    fn reads_line(&self, what: &str) -> String {
        let kinds: Vec<String> = self
            .counts
            .reads
            .named()
            .iter()
            .map(|(name, count)| format!("{:.1} {name}", self.per_second(*count)))
            .collect();
        format!("{what}, read calls per second: {}", kinds.join(", "))
    }
}

/// A fleet run's figures.
#[derive(Debug, Serialize)]
pub struct FleetReport {
    /// Participants run.
    pub nodes: u32,
    /// The group's partitions.
    pub partitions: u32,
    /// `per-partition` or `session`.
    pub lease_mode: String,
    /// The store, as its URL shows it (without a password).
    pub store: String,
    /// Store clients (connections, sessions) the participants shared.
    pub clients: u32,
    /// How long the run lasted.
    pub seconds: f64,
    /// From the start of every participant to every partition owned.
    pub every_partition_owned_after: Option<f64>,
    /// The group was used before, so its records were created held by nobody and the first
    /// takes waited `acquire_after`.
    pub held_by_nobody: bool,
    /// Partitions held by some participant when the run ended.
    pub owned_at_end: usize,
    /// The clients' calls over the whole run.
    pub whole_run: Window,
    /// From every partition owned to the end.
    pub settled: Option<Window>,
    /// What the store's server counted, per second, over the whole run and once settled
    /// (PostgreSQL and etcd; PostgreSQL publishes its counts up to a second or so late).
    pub server_counts: Option<(ServerRates, Option<ServerRates>)>,
    /// Median and 99th percentile of the store's write calls, in milliseconds.
    pub write_latency_ms: Option<[f64; 2]>,
    /// Median and 99th percentile of the member record writes (by session, the renewals), in
    /// milliseconds.
    pub member_write_latency_ms: Option<[f64; 2]>,
    /// Member record writes that failed.
    pub failed_member_writes: u64,
    /// Scans of the table per participant.
    pub scans_per_node: f64,
    /// Readings of the whole lease table per participant.
    pub lease_readings_per_node: f64,
    /// Readings of the whole table the participants set out to make, failed ones included,
    /// by why (the names of `leasehold_lease_listings_started_total`'s reasons).
    pub listings_started: std::collections::BTreeMap<String, u64>,
    /// Scans the participants started, by why each ran when it did: at its interval, after
    /// a failure's back-off, or brought forward by a notice, a release, a lost race or a
    /// store answering again.
    pub scans_started: std::collections::BTreeMap<String, u64>,
    /// Leases that ended other than by a hand-off: expired, conflict, changed.
    pub leases_lost: [u64; 3],
    /// This process: the participants, the store clients and the runtime.
    pub fleet_process: Usage,
    /// The store's server processes, by command name, when asked for.
    pub server: Option<(String, Usage)>,
}

impl FleetReport {
    /// No lease lost, and every partition owned at the end.
    pub fn healthy(&self) -> bool {
        self.leases_lost.iter().sum::<u64>() == 0 && self.owned_at_end == self.partitions as usize
    }

    /// Prints the report as text, or as one JSON document.
    pub fn print(&self, json: bool) -> anyhow::Result<()> {
        if json {
            return crate::say(&serde_json::to_string_pretty(self)?);
        }
        let mut lines = vec![format!(
            "fleet: {} nodes × {} partitions, {}, {:.1} s on {}, {} store client(s)",
            self.nodes, self.partitions, self.lease_mode, self.seconds, self.store, self.clients
        )];
        lines.push(match self.every_partition_owned_after {
            Some(after) => format!("every partition owned after {after:.2} s"),
            None => "NOT every partition was owned during the run".to_owned(),
        });
        if self.held_by_nobody {
            lines.push(
                "the group was used before: its records were created held by nobody, so the \
                 first takes waited acquire_after (name a new group to measure a cold start)"
                    .to_owned(),
            );
        }
        lines.push(self.whole_run.line("whole run"));
        lines.push(self.whole_run.reads_line("whole run"));
        if let Some(settled) = &self.settled {
            lines.push(settled.line("once settled"));
            lines.push(settled.reads_line("once settled"));
        }
        if let Some((whole, settled)) = &self.server_counts {
            for (what, rates) in [
                ("whole run", Some(whole)),
                ("once settled", settled.as_ref()),
            ] {
                let Some(rates) = rates else { continue };
                let counts: Vec<String> = rates
                    .per_second
                    .iter()
                    .map(|(name, rate)| format!("{rate:.1} {name}"))
                    .collect();
                lines.push(format!(
                    "the server counted, {what}: {} per second",
                    counts.join(", ")
                ));
            }
        }
        if let Some([p50, p99]) = self.write_latency_ms {
            lines.push(format!(
                "write calls: median {p50:.2} ms, 99th percentile {p99:.2} ms"
            ));
        }
        if let Some([p50, p99]) = self.member_write_latency_ms {
            lines.push(format!(
                "member record writes: median {p50:.2} ms, 99th percentile {p99:.2} ms, {} failed",
                self.failed_member_writes
            ));
        }
        lines.push(format!(
            "per node: {:.1} scans, {:.1} readings of the lease table",
            self.scans_per_node, self.lease_readings_per_node
        ));
        lines.extend(by_why("scans set out", &self.scans_started));
        lines.extend(by_why(
            "readings of the lease table set out",
            &self.listings_started,
        ));
        let [expired, conflict, changed] = self.leases_lost;
        lines.push(format!(
            "leases lost: {} (expired {expired}, conflict {conflict}, changed {changed}); {} of {} \
             partitions owned at the end",
            expired + conflict + changed,
            self.owned_at_end,
            self.partitions
        ));
        let usage = |what: &str, usage: &Usage| {
            format!(
                "{what}: {:.1} s of CPU ({:.0}% of one core), {:.0} MiB resident, {:.0} MiB at most",
                usage.cpu_seconds,
                usage.cpu_seconds / self.seconds * 100.0,
                usage.rss_mib,
                usage.peak_rss_mib
            )
        };
        lines.push(usage("this process", &self.fleet_process));
        if let Some((name, server)) = &self.server {
            lines.push(usage(
                &format!("store server ({} {name} processes)", server.processes),
                server,
            ));
        }
        crate::say(&lines.join("\n"))
    }
}

/// `what, by why: cause count, …`, or nothing when none were counted.
fn by_why(what: &str, counts: &std::collections::BTreeMap<String, u64>) -> Option<String> {
    if counts.is_empty() {
        return None;
    }
    let causes: Vec<String> = counts
        .iter()
        .map(|(cause, count)| format!("{cause} {count}"))
        .collect();
    Some(format!("{what}, by why: {}", causes.join(", ")))
}
