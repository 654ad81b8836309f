//! The bench's results: every run's figures per change, summarised as min, median, p99 and
//! max, printed as a table or as one JSON document.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{json, Value};

use super::steady::SteadyFigures;
use super::timeline::Figures;
use super::{Change, Settings};
use crate::table::Table;

/// Everything measured so far.
pub struct Report {
    settings: Settings,
    store: String,
    by_change: BTreeMap<Change, Vec<Figures>>,
    /// The store load at rest, one per run, when measured.
    steady: Vec<SteadyFigures>,
    /// Runs that could not finish, and why.
    pub failures: Vec<String>,
    /// Fence-log lines that could not be read.
    pub malformed: usize,
}

/// Min, median, p99 (nearest rank) and max of some samples.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Spread {
    min: f64,
    median: f64,
    p99: f64,
    max: f64,
}

impl Spread {
    fn of(samples: impl IntoIterator<Item = f64>) -> Option<Spread> {
        let mut sorted: Vec<f64> = samples.into_iter().collect();
        if sorted.is_empty() {
            return None;
        }
        sorted.sort_by(f64::total_cmp);
        let rank =
            |q: f64| sorted[((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1];
        Some(Spread {
            min: sorted[0],
            median: rank(0.5),
            p99: rank(0.99),
            max: sorted[sorted.len() - 1],
        })
    }

    fn json(self) -> Value {
        json!({ "min": self.min, "median": self.median, "p99": self.p99, "max": self.max })
    }
}

impl Report {
    /// An empty report for a bench with `settings` on `store` (its URL, credentials hidden).
    pub fn new(settings: &Settings, store: String) -> Report {
        Report {
            settings: settings.clone(),
            store,
            by_change: BTreeMap::new(),
            steady: Vec::new(),
            failures: Vec::new(),
            malformed: 0,
        }
    }

    /// Adds one run's figures for `change`.
    pub fn add(&mut self, change: Change, figures: Figures) {
        self.by_change.entry(change).or_default().push(figures);
    }

    /// Adds one run's store load at rest.
    pub fn add_steady(&mut self, figures: SteadyFigures) {
        self.steady.push(figures);
    }

    /// Whether every run finished, every change settled, and no partition had two owners.
    pub fn clean(&self) -> bool {
        self.failures.is_empty()
            && self
                .by_change
                .values()
                .flatten()
                .all(|f| f.double_owners == 0 && f.settled_s.is_some())
    }

    /// The first lines printed: what is being measured.
    pub fn heading(&self) -> String {
        let s = &self.settings;
        format!(
            "leasehold bench on {}: {} nodes, {} partitions, {} run(s) of {}\n\
             heartbeat {}, validity {}, acquire_after {}, scan {}, store timeout {}, pause {}\n\
             lease mode {}, steady-state window {}{}",
            self.store,
            s.nodes,
            s.partitions,
            s.runs,
            s.changes
                .iter()
                .map(|c| c.name())
                .collect::<Vec<_>>()
                .join(", "),
            duration(s.heartbeat),
            duration(s.validity),
            duration(s.acquire_after),
            duration(s.scan_interval),
            duration(s.store_timeout),
            duration(s.pause),
            s.lease_mode,
            if s.steady.is_zero() {
                "off".to_owned()
            } else {
                duration(s.steady)
            },
            if s.restart_in_place {
                format!(
                    ", nodes restart in place (window {})",
                    duration(s.acquire_after * leasehold::MAX_RESTART_WINDOW_FACTOR)
                )
            } else {
                String::new()
            },
        )
    }

    /// One line after each run.
    pub fn progress(&self, run: usize) -> String {
        let double: usize = self
            .by_change
            .values()
            .flatten()
            .map(|f| f.double_owners)
            .sum();
        format!(
            "run {run}/{} done; double owners so far: {double}",
            self.settings.runs
        )
    }

    /// The results as a table: times as median (min–max), counts as median, moves against
    /// the fewest possible, and totals of expiries and double owners over every run.
    pub fn table(&self) -> String {
        let mut table = Table::new(vec![
            "change",
            "runs",
            "settled",
            "owned again",
            "unowned p·s",
            "interrupted",
            "longest gap",
            "moves/min",
            "same holder",
            "expiries",
            "double owners",
        ]);
        for (change, runs) in &self.by_change {
            let times = |pick: fn(&Figures) -> Option<f64>| {
                Spread::of(runs.iter().filter_map(pick)).map_or("-".to_owned(), seconds_spread)
            };
            let never = runs.iter().filter(|f| f.settled_s.is_none()).count();
            let mut settled = times(|f| f.settled_s);
            if never > 0 {
                settled.push_str(&format!(" ({never} never)"));
            }
            let count = |pick: fn(&Figures) -> usize| {
                Spread::of(runs.iter().map(|f| pick(f) as f64))
                    .map_or("-".to_owned(), |s| format!("{}", s.median))
            };
            let moves = Spread::of(runs.iter().map(|f| f.moves as f64));
            let fewest = Spread::of(runs.iter().map(|f| f.min_moves as f64));
            let moves = match (moves, fewest) {
                (Some(m), Some(f)) if m.min == m.max => format!("{}/{}", m.median, f.median),
                (Some(m), Some(f)) => format!("{}–{}/{}", m.min, m.max, f.median),
                _ => "-".to_owned(),
            };
            table.push(vec![
                change.name().to_owned(),
                runs.len().to_string(),
                settled,
                times(|f| Some(f.owned_again_s)),
                Spread::of(runs.iter().map(|f| f.unowned_partition_s))
                    .map_or("-".to_owned(), |s| format!("{:.3}", s.median)),
                count(|f| f.interrupted),
                times(|f| Some(f.longest_gap_s)),
                moves,
                Spread::of(runs.iter().map(|f| f.same_holder as f64)).map_or("-".to_owned(), |s| {
                    let share = s.median / f64::from(self.settings.partitions.max(1));
                    format!("{:.0}%", 100.0 * share)
                }),
                runs.iter().map(|f| f.expiries).sum::<usize>().to_string(),
                runs.iter()
                    .map(|f| f.double_owners)
                    .sum::<usize>()
                    .to_string(),
            ]);
        }
        let mut text = table.render();
        if !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(
            "times: median (min–max); unowned p·s and interrupted: median per run; \
             moves/min: moves made against the fewest possible; same holder: partitions held \
             at the end by their holder at the start (median); expiries and double owners: \
             totals over every run",
        );
        if self.malformed > 0 {
            text.push_str(&format!(
                "\n{} fence-log lines could not be read and were skipped",
                self.malformed
            ));
        }
        if !self.steady.is_empty() {
            text.push_str("\n\n");
            text.push_str(&self.steady_table());
        }
        for failure in &self.failures {
            text.push_str(&format!("\nFAILED {failure}"));
        }
        text
    }

    /// The store load at rest, one row per run, and what its columns count.
    fn steady_table(&self) -> String {
        let mut table = Table::new(vec![
            "run",
            "window",
            "nodes",
            "write calls/s",
            "records/s",
            "renewal records/s",
            "single writes/s",
            "transactions/s",
            "other batches/s",
            "reads/s",
            "errors",
            "changes",
        ]);
        for (run, f) in self.steady.iter().enumerate() {
            table.push(vec![
                (run + 1).to_string(),
                seconds(f.measured_window_s),
                format!("{}/{}", f.answered, f.nodes),
                format!("{:.2}", f.write_calls_per_s),
                format!("{:.2}", f.records_per_s),
                format!("{:.2}", f.renewal_records_per_s),
                format!("{:.2}", f.single_record_writes_per_s),
                format!("{:.2}", f.transactions_per_s),
                format!("{:.2}", f.other_batches_per_s),
                format!("{:.2}", f.read_calls_per_s),
                f.store_errors.to_string(),
                f.ownership_changes.to_string(),
            ]);
        }
        let mut text = format!(
            "store load at rest after the cold start, {} lease mode, from the nodes' metrics:\n",
            self.settings.lease_mode
        );
        text.push_str(&table.render());
        text.push_str(
            "window: mean time between a node's two scrapes; nodes: answered both scrapes / \
             running; write calls: put_lease, put_leases, put_member, put_group, delete_lease, \
             delete_member and transact, one each, failed ones included; records: lease \
             records sent in renewal batches + single writes (one record each) + 2 per \
             transaction (a take from a session: the lease and the holder's session); other \
             batches: put_leases calls that were not renewals, whose rows are not in records; \
             errors: failed store calls and batch writes in the window; changes: fence-log \
             events (acquisitions, losses) in the window",
        );
        for (run, f) in self.steady.iter().enumerate() {
            if let Some(batch) = f.renewal_batch_records() {
                text.push_str(&format!(
                    "\nrun {}: {:.2} renewal batches/s of {:.1} lease records on average; calls/s by \
                     operation: {}",
                    run + 1,
                    f.renewal_batches_per_s,
                    batch,
                    by_operation(f)
                ));
            } else {
                text.push_str(&format!(
                    "\nrun {}: no renewal batch; calls/s by operation: {}",
                    run + 1,
                    by_operation(f)
                ));
            }
            for node in &f.unanswered {
                text.push_str(&format!("\nrun {}: not counted: {node}", run + 1));
            }
        }
        text
    }

    /// The whole report as JSON: settings, every run's figures and their spreads.
    pub fn json(&self) -> Value {
        let s = &self.settings;
        let changes: Vec<Value> = self
            .by_change
            .iter()
            .map(|(change, runs)| {
                let spread = |pick: fn(&Figures) -> f64| {
                    Spread::of(runs.iter().map(pick)).map(Spread::json)
                };
                json!({
                    "change": change,
                    "runs": runs,
                    "summary": {
                        "settled_s": Spread::of(runs.iter().filter_map(|f| f.settled_s)).map(Spread::json),
                        "never_settled": runs.iter().filter(|f| f.settled_s.is_none()).count(),
                        "owned_again_s": spread(|f| f.owned_again_s),
                        "unowned_partition_s": spread(|f| f.unowned_partition_s),
                        "interrupted": spread(|f| f.interrupted as f64),
                        "longest_gap_s": spread(|f| f.longest_gap_s),
                        "moves": spread(|f| f.moves as f64),
                        "min_moves": spread(|f| f.min_moves as f64),
                        "same_holder": spread(|f| f.same_holder as f64),
                        "expiries": runs.iter().map(|f| f.expiries).sum::<usize>(),
                        "double_owners": runs.iter().map(|f| f.double_owners).sum::<usize>(),
                    },
                })
            })
            .collect();
        let steady = (!s.steady.is_zero()).then(|| {
            let spread = |pick: fn(&SteadyFigures) -> f64| {
                Spread::of(self.steady.iter().map(pick)).map(Spread::json)
            };
            json!({
                "window_ms": millis(s.steady),
                "runs": self.steady,
                "summary": {
                    "write_calls_per_s": spread(|f| f.write_calls_per_s),
                    "records_per_s": spread(|f| f.records_per_s),
                    "complete": self.steady.iter().all(SteadyFigures::complete),
                },
            })
        });
        json!({
            "store": self.store,
            "nodes": s.nodes,
            "partitions": s.partitions,
            "runs": s.runs,
            "lease_mode": s.lease_mode.as_str(),
            "restart_in_place": s.restart_in_place,
            "timings_ms": {
                "heartbeat": millis(s.heartbeat),
                "lease_validity": millis(s.validity),
                "acquire_after": millis(s.acquire_after),
                "scan_interval": millis(s.scan_interval),
                "store_timeout": millis(s.store_timeout),
                "pause": millis(s.pause),
                "quiet": millis(s.quiet),
            },
            "changes": changes,
            "steady": steady,
            "malformed_log_lines": self.malformed,
            "failures": self.failures,
            "clean": self.clean(),
        })
    }
}

/// `operation rate` for every operation called in the window, busiest first.
fn by_operation(figures: &SteadyFigures) -> String {
    let mut calls: Vec<(&String, &f64)> = figures
        .calls_per_s
        .iter()
        .filter(|(_, rate)| **rate > 0.0)
        .collect();
    calls.sort_by(|a, b| b.1.total_cmp(a.1));
    calls
        .iter()
        .map(|(operation, rate)| format!("{operation} {rate:.2}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

fn duration(value: Duration) -> String {
    seconds(value.as_secs_f64())
}

/// Seconds in the unit that reads best: microseconds, milliseconds or seconds.
fn seconds(value: f64) -> String {
    if value == 0.0 {
        "0".to_owned()
    } else if value < 0.001 {
        format!("{:.0} µs", value * 1e6)
    } else if value < 0.01 {
        format!("{:.1} ms", value * 1e3)
    } else if value < 1.0 {
        format!("{:.0} ms", value * 1e3)
    } else {
        format!("{value:.2} s")
    }
}

fn seconds_spread(spread: Spread) -> String {
    if spread.min == spread.max {
        seconds(spread.median)
    } else {
        format!(
            "{} ({}–{})",
            seconds(spread.median),
            seconds(spread.min),
            seconds(spread.max)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spreads_use_the_nearest_rank() {
        let spread = Spread::of((1..=20).map(f64::from)).unwrap();
        assert_eq!(spread.min, 1.0);
        assert_eq!(spread.median, 10.0);
        assert_eq!(spread.p99, 20.0);
        assert_eq!(spread.max, 20.0);
        assert_eq!(Spread::of([]), None);
    }

    #[test]
    fn seconds_read_in_their_unit() {
        assert_eq!(seconds(0.0000012), "1 µs");
        assert_eq!(seconds(0.0052), "5.2 ms");
        assert_eq!(seconds(0.0112), "11 ms");
        assert_eq!(seconds(0.47), "470 ms");
        assert_eq!(seconds(3.184), "3.18 s");
    }
}
