//! The store load of a settled fleet: every node's own counts of its store calls, scraped
//! from its metrics endpoint at the start and at the end of a window, and their differences
//! as rates.
//!
//! The counts are the nodes' [`LeaseStore`](leasehold::LeaseStore) calls, as
//! `leasehold_store_call_duration_seconds_count` labels them by operation: one call however
//! many records it carries, and whatever round trips the backend makes for it. Calls that
//! failed or timed out are counted too: they loaded the store all the same.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long a node's metrics endpoint gets to answer. A node that does not is named in the
/// figures, which are then those of the nodes that did.
pub const SCRAPE_TIMEOUT: Duration = Duration::from_secs(5);

/// The most read of one answer: a node's page is a few tens of kilobytes.
const MAX_SCRAPE_BYTES: u64 = 4 * 1024 * 1024;

/// The store operations that write.
const WRITE_OPERATIONS: [&str; 7] = [
    "put_lease",
    "put_leases",
    "put_member",
    "put_group",
    "delete_lease",
    "delete_member",
    "transact",
];

/// The write operations that carry exactly one record.
const SINGLE_RECORD_WRITES: [&str; 5] = [
    "put_lease",
    "put_member",
    "put_group",
    "delete_lease",
    "delete_member",
];

/// Records in each transaction a node makes. Its only one is a take from a session, which
/// writes the lease record and the holder's session; the metrics do not count records per
/// transaction, so a change there must change this.
const RECORDS_PER_TRANSACTION: f64 = 2.0;

/// A node's counters at one instant, as its metrics endpoint reported them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counters {
    /// Store calls by operation (`leasehold_store_call_duration_seconds_count`).
    calls: BTreeMap<String, f64>,
    /// Renewal batches (`leasehold_renewal_batch_size_count`).
    renewal_batches: f64,
    /// Lease records sent in renewal batches (`leasehold_renewal_batch_size_sum`).
    renewal_records: f64,
    /// Failed store calls, failed writes of batches and unreadable records
    /// (`leasehold_store_errors_total`).
    errors: f64,
}

impl Counters {
    /// The counters in a page of Prometheus text; lines of other metrics are ignored.
    pub fn parse(text: &str) -> Counters {
        let mut counters = Counters::default();
        for line in text.lines().filter(|line| !line.starts_with('#')) {
            let Some((name, labels, value)) = sample(line) else {
                continue;
            };
            match name {
                "leasehold_store_call_duration_seconds_count" => {
                    if let Some(operation) = label(labels, "operation") {
                        *counters.calls.entry(operation.to_owned()).or_default() += value;
                    }
                }
                "leasehold_renewal_batch_size_count" => counters.renewal_batches += value,
                "leasehold_renewal_batch_size_sum" => counters.renewal_records += value,
                "leasehold_store_errors_total" => counters.errors += value,
                _ => {}
            }
        }
        counters
    }

    fn calls(&self, operation: &str) -> f64 {
        self.calls.get(operation).copied().unwrap_or(0.0)
    }

    /// What was counted from `earlier` to `self`, or `None` if any counter went back (the
    /// process was replaced in between).
    fn since(&self, earlier: &Counters) -> Option<Counters> {
        let difference = |now: f64, then: f64| (now >= then).then_some(now - then);
        let mut calls = BTreeMap::new();
        for operation in self.calls.keys().chain(earlier.calls.keys()) {
            let counted = difference(self.calls(operation), earlier.calls(operation))?;
            calls.insert(operation.clone(), counted);
        }
        Some(Counters {
            calls,
            renewal_batches: difference(self.renewal_batches, earlier.renewal_batches)?,
            renewal_records: difference(self.renewal_records, earlier.renewal_records)?,
            errors: difference(self.errors, earlier.errors)?,
        })
    }
}

/// `name{labels} value` (or `name value`) of one sample line, the labels still encoded.
fn sample(line: &str) -> Option<(&str, &str, f64)> {
    let (name, labels, rest) = match line.find('{') {
        Some(open) => {
            let close = line.rfind('}')?;
            (
                &line[..open],
                line.get(open + 1..close)?,
                &line[close + 1..],
            )
        }
        None => {
            let (name, rest) = line.split_once(' ')?;
            (name, "", rest)
        }
    };
    let value = rest.split_whitespace().next()?.parse().ok()?;
    Some((name, labels, value))
}

/// The value of label `name` in `a="x",b="y"`, if it holds no escaped character (the
/// operation labels never do).
fn label<'a>(labels: &'a str, name: &str) -> Option<&'a str> {
    labels.split("\",").find_map(|pair| {
        let (key, value) = pair.split_once("=\"")?;
        (key == name)
            .then(|| value.trim_end_matches('"'))
            .filter(|value| !value.contains('\\'))
    })
}

/// One node's answer to a scrape: its counters and when they were read, or why not.
pub type Scrape = Result<(Instant, Counters), String>;

/// Reads `http://<address>/metrics`, for at most [`SCRAPE_TIMEOUT`].
pub async fn scrape(address: &str) -> Scrape {
    match tokio::time::timeout(SCRAPE_TIMEOUT, get_metrics(address)).await {
        Ok(Ok(text)) => Ok((Instant::now(), Counters::parse(&text))),
        Ok(Err(error)) => Err(format!("{error:#}")),
        Err(_) => Err(format!("no answer within {SCRAPE_TIMEOUT:?}")),
    }
}

/// A plain HTTP/1.0 GET: the server closes the connection after the body, so reading to
/// the end reads exactly the answer, with no chunked encoding to undo.
async fn get_metrics(address: &str) -> anyhow::Result<String> {
    let mut stream = TcpStream::connect(address)
        .await
        .with_context(|| format!("cannot connect to {address}"))?;
    let request = format!("GET /metrics HTTP/1.0\r\nHost: {address}\r\n\r\n");
    stream
        .write_all(request.as_bytes())
        .await
        .with_context(|| format!("cannot send to {address}"))?;
    let mut bytes = Vec::new();
    stream
        .take(MAX_SCRAPE_BYTES + 1)
        .read_to_end(&mut bytes)
        .await
        .with_context(|| format!("cannot read from {address}"))?;
    anyhow::ensure!(
        bytes.len() as u64 <= MAX_SCRAPE_BYTES,
        "{address} answered more than {MAX_SCRAPE_BYTES} bytes"
    );
    let text = String::from_utf8(bytes).context("the answer is not UTF-8")?;
    let (head, body) = text
        .split_once("\r\n\r\n")
        .context("the answer has no header end")?;
    let status = head.lines().next().unwrap_or_default();
    anyhow::ensure!(
        status.split(' ').nth(1) == Some("200"),
        "{address} answered {status:?}"
    );
    Ok(body.to_owned())
}

/// The store load of the fleet over one window: each node's counts between its two scrapes,
/// divided by the time between them, summed over the nodes.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SteadyFigures {
    /// The window asked for, in seconds.
    pub window_s: f64,
    /// The time between a node's two scrapes, averaged over the nodes that answered both.
    pub measured_window_s: f64,
    /// Nodes running through the window.
    pub nodes: usize,
    /// Nodes whose figures are included: both scrapes answered.
    pub answered: usize,
    /// The others, each with why.
    pub unanswered: Vec<String>,
    /// Store write calls per second: every operation in [`WRITE_OPERATIONS`], one each.
    pub write_calls_per_s: f64,
    /// Records written per second: `renewal_records_per_s + single_record_writes_per_s +
    /// 2 × transactions_per_s`. Rows of `other_batches_per_s` are not in it.
    pub records_per_s: f64,
    /// Renewal batches (`put_leases` calls of renewals) per second.
    pub renewal_batches_per_s: f64,
    /// Lease records sent in renewal batches per second.
    pub renewal_records_per_s: f64,
    /// Writes of one record each (put_lease, put_member, put_group, delete_lease,
    /// delete_member) per second.
    pub single_record_writes_per_s: f64,
    /// Transactions per second, each a take from a session of two records.
    pub transactions_per_s: f64,
    /// `put_leases` calls that were not renewal batches (takes, hand-offs, load updates) per
    /// second; the nodes do not count their rows.
    pub other_batches_per_s: f64,
    /// Store read calls per second (every operation that is not a write).
    pub read_calls_per_s: f64,
    /// Calls per second of every operation the nodes counted.
    pub calls_per_s: BTreeMap<String, f64>,
    /// Failed store calls, failed writes of batches and unreadable records, over the window.
    pub store_errors: f64,
    /// Fence-log events (acquisitions and losses) in the window: 0 for a fleet at rest.
    pub ownership_changes: usize,
}

impl SteadyFigures {
    /// The figures of a window of `window` from each node's first and second scrape
    /// (nodes in `first` only count as unanswered), with `ownership_changes` seen meanwhile.
    pub fn compute(
        window: Duration,
        first: &BTreeMap<String, Scrape>,
        second: &BTreeMap<String, Scrape>,
        ownership_changes: usize,
    ) -> SteadyFigures {
        let mut figures = SteadyFigures {
            window_s: window.as_secs_f64(),
            nodes: first.len(),
            ownership_changes,
            ..SteadyFigures::default()
        };
        let mut measured = 0.0;
        for (node, start) in first {
            let end = second
                .get(node)
                .cloned()
                .unwrap_or_else(|| Err("not scraped at the end".to_owned()));
            let counted = match (start, end) {
                (Ok((started, then)), Ok((ended, now))) => now
                    .since(then)
                    .map(|counted| (counted, ended.saturating_duration_since(*started)))
                    .ok_or_else(|| "its counters went back: restarted?".to_owned()),
                (Err(error), _) => Err(format!("at the start: {error}")),
                (_, Err(error)) => Err(format!("at the end: {error}")),
            };
            match counted {
                Ok((counted, span)) if !span.is_zero() => {
                    figures.add(&counted, span.as_secs_f64());
                    measured += span.as_secs_f64();
                    figures.answered += 1;
                }
                Ok(_) => figures
                    .unanswered
                    .push(format!("{node}: both scrapes at one instant")),
                Err(error) => figures.unanswered.push(format!("{node}: {error}")),
            }
        }
        if figures.answered > 0 {
            figures.measured_window_s = measured / figures.answered as f64;
        }
        figures
    }

    /// Adds one node's counts over `seconds`.
    fn add(&mut self, counted: &Counters, seconds: f64) {
        let rate = |count: f64| count / seconds;
        let sum = |operations: &[&str]| operations.iter().map(|o| counted.calls(o)).sum::<f64>();
        let writes = sum(&WRITE_OPERATIONS);
        let single = sum(&SINGLE_RECORD_WRITES);
        let transactions = counted.calls("transact");
        let all: f64 = counted.calls.values().sum();
        self.write_calls_per_s += rate(writes);
        self.read_calls_per_s += rate(all - writes);
        self.renewal_batches_per_s += rate(counted.renewal_batches);
        self.renewal_records_per_s += rate(counted.renewal_records);
        self.single_record_writes_per_s += rate(single);
        self.transactions_per_s += rate(transactions);
        self.other_batches_per_s +=
            rate((counted.calls("put_leases") - counted.renewal_batches).max(0.0));
        self.records_per_s +=
            rate(counted.renewal_records + single + RECORDS_PER_TRANSACTION * transactions);
        for (operation, count) in &counted.calls {
            *self.calls_per_s.entry(operation.clone()).or_default() += rate(*count);
        }
        self.store_errors += counted.errors;
    }

    /// Whether every node running through the window is in the figures.
    pub fn complete(&self) -> bool {
        self.unanswered.is_empty() && self.answered == self.nodes
    }

    /// Average records per renewal batch, if there was any.
    pub fn renewal_batch_records(&self) -> Option<f64> {
        (self.renewal_batches_per_s > 0.0)
            .then(|| self.renewal_records_per_s / self.renewal_batches_per_s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: &str = r#"# HELP leasehold_store_call_duration_seconds Store calls by operation, time-outs included.
# TYPE leasehold_store_call_duration_seconds histogram
leasehold_store_call_duration_seconds_sum{group="g",node="n1",operation="put_leases"} 0.5
leasehold_store_call_duration_seconds_count{group="g",node="n1",operation="put_leases"} 10
leasehold_store_call_duration_seconds_bucket{le="0.0005",group="g",node="n1",operation="put_leases"} 0
leasehold_store_call_duration_seconds_count{group="g",node="n1",operation="put_member"} 12
leasehold_store_call_duration_seconds_count{group="g",node="n1",operation="transact"} 1
leasehold_store_call_duration_seconds_count{group="g",node="n1",operation="list_leases"} 4
leasehold_renewal_batch_size_sum{group="g",node="n1"} 160.0
leasehold_renewal_batch_size_count{group="g",node="n1"} 9
leasehold_store_errors_total{group="g",node="n1",operation="put_member",kind="timeout"} 1
leasehold_leases_held{group="g",node="n1"} 16
"#;

    #[test]
    fn a_page_is_read_for_its_counters() {
        let counters = Counters::parse(PAGE);
        assert_eq!(counters.calls("put_leases"), 10.0);
        assert_eq!(counters.calls("put_member"), 12.0);
        assert_eq!(counters.calls("transact"), 1.0);
        assert_eq!(counters.calls("list_leases"), 4.0);
        assert_eq!(counters.calls("delete_lease"), 0.0);
        assert_eq!(counters.renewal_batches, 9.0);
        assert_eq!(counters.renewal_records, 160.0);
        assert_eq!(counters.errors, 1.0);
    }

    #[test]
    fn labels_are_found_by_name_only() {
        assert_eq!(
            label(r#"group="g",operation="put_lease""#, "operation"),
            Some("put_lease")
        );
        assert_eq!(
            label(r#"operation="put_lease",kind="x""#, "operation"),
            Some("put_lease")
        );
        assert_eq!(label(r#"my_operation="x""#, "operation"), None);
        assert_eq!(label(r#"operation="a\"b""#, "operation"), None);
    }

    fn scrapes(at: Instant, counters: Counters) -> BTreeMap<String, Scrape> {
        BTreeMap::from([("n1".to_owned(), Ok((at, counters)))])
    }

    #[test]
    fn rates_are_differences_over_each_nodes_own_window() {
        let start = Instant::now();
        let first = scrapes(start, Counters::default());
        let second = scrapes(start + Duration::from_secs(10), Counters::parse(PAGE));
        let figures = SteadyFigures::compute(Duration::from_secs(10), &first, &second, 0);
        assert!(figures.complete());
        assert_eq!(figures.measured_window_s, 10.0);
        // put_leases 10 + put_member 12 + transact 1.
        assert_eq!(figures.write_calls_per_s, 2.3);
        // 160 renewal records + 12 member writes + 2 for the transaction.
        assert_eq!(figures.records_per_s, 17.4);
        assert_eq!(figures.read_calls_per_s, 0.4);
        // One put_leases call was not a renewal.
        assert_eq!(figures.other_batches_per_s, 0.1);
        assert_eq!(figures.renewal_batch_records(), Some(160.0 / 9.0));
        assert_eq!(figures.store_errors, 1.0);
    }

    #[test]
    fn a_node_that_did_not_answer_is_named_not_counted() {
        let start = Instant::now();
        let mut first = scrapes(start, Counters::default());
        first.insert("n2".to_owned(), Err("no answer within 5s".to_owned()));
        let second = scrapes(start + Duration::from_secs(5), Counters::parse(PAGE));
        let figures = SteadyFigures::compute(Duration::from_secs(5), &first, &second, 0);
        assert_eq!((figures.nodes, figures.answered), (2, 1));
        assert!(!figures.complete());
        assert_eq!(
            figures.unanswered,
            ["n2: at the start: no answer within 5s"]
        );
    }

    #[test]
    fn counters_that_went_back_are_not_counted() {
        let start = Instant::now();
        let first = scrapes(start, Counters::parse(PAGE));
        let second = scrapes(start + Duration::from_secs(5), Counters::default());
        let figures = SteadyFigures::compute(Duration::from_secs(5), &first, &second, 0);
        assert_eq!(figures.answered, 0);
        assert_eq!(figures.write_calls_per_s, 0.0);
        assert!(figures.unanswered[0].contains("went back"));
    }
}
