//! The checks over the logs the nodes wrote, made without the library's code: only the
//! lines' stamps (one host clock for every process), nodes, partitions and epochs.
//!
//! A unit of work runs from its `work` line to its `done` line: the node held a valid
//! permit at both stamps, so it was entitled to the partition throughout. An `abandoned`
//! unit, or one whose process died first, is certain only at its start.
//!
//! A tenure, from the fence log, runs from its `acquired` line to its `expired` (stamped
//! with the deadline), `released` or `stopped` line: what the node believed it held. A
//! tenure that ended in a `conflict` or `changed` line, or not at all, is certain only at
//! its start: the node learned of the change late, and its deadline may have passed before.

use std::collections::BTreeMap;

use crate::common::LogLine;

/// One unit's certain span, in nanoseconds since the Unix epoch.
#[derive(Debug, Clone)]
pub struct Span {
    pub node: String,
    pub epoch: u64,
    pub start: u128,
    pub end: u128,
}

/// What the logs show.
#[derive(Debug, Default)]
pub struct Findings {
    /// Units done, per partition.
    pub units: usize,
    /// Two nodes' units on one partition at once.
    pub overlaps: Vec<String>,
    /// Work under an epoch lower than work done before it on the same partition.
    pub stale_epochs: Vec<String>,
    /// Tenures, from the fence log.
    pub tenures: usize,
    /// Two nodes believing they held one partition at once.
    pub tenure_overlaps: Vec<String>,
}

impl Findings {
    /// Whether the logs show nothing wrong.
    pub fn safe(&self) -> bool {
        self.overlaps.is_empty() && self.stale_epochs.is_empty() && self.tenure_overlaps.is_empty()
    }
}

/// Each partition's unit spans, from a work log's lines.
pub fn spans(lines: &[LogLine]) -> BTreeMap<u32, Vec<Span>> {
    intervals(lines, "work", &["done"])
}

/// Each partition's tenures, from a fence log's lines.
pub fn tenures(lines: &[LogLine]) -> BTreeMap<u32, Vec<Span>> {
    intervals(lines, "acquired", &["expired", "released", "stopped"])
}

/// Each partition's spans, sorted by start: each `opening` line starts one for its node and
/// the node's next other line of the partition ends it, at that line's stamp if its event is
/// one of `certain` (under the same epoch), else at its start. A span opened again, or
/// never ended (its process died), is certain only at its start.
fn intervals(lines: &[LogLine], opening: &str, certain: &[&str]) -> BTreeMap<u32, Vec<Span>> {
    let mut open: BTreeMap<(u32, String), Span> = BTreeMap::new();
    let mut by_partition: BTreeMap<u32, Vec<Span>> = BTreeMap::new();
    for line in lines {
        let key = (line.partition, line.node.clone());
        if line.event == opening {
            let span = Span {
                node: line.node.clone(),
                epoch: line.epoch,
                start: line.at,
                end: line.at,
            };
            if let Some(unended) = open.insert(key, span) {
                by_partition
                    .entry(line.partition)
                    .or_default()
                    .push(unended);
            }
            continue;
        }
        if let Some(mut span) = open.remove(&key) {
            let ended = certain.contains(&line.event.as_str())
                && line.epoch == span.epoch
                && line.at >= span.start;
            if ended {
                span.end = line.at;
            }
            by_partition.entry(line.partition).or_default().push(span);
        }
    }
    for ((partition, _), span) in open {
        by_partition.entry(partition).or_default().push(span);
    }
    for spans in by_partition.values_mut() {
        spans.sort_by_key(|span| span.start);
    }
    by_partition
}

/// Checks tenures as [`check`] checks units: no two nodes' tenures of one partition
/// intersect.
pub fn check_tenures(by_partition: &BTreeMap<u32, Vec<Span>>, findings: &mut Findings) {
    let checked = check(by_partition);
    findings.tenures = checked.units;
    findings.tenure_overlaps = checked.overlaps;
}

/// Checks the spans: no two nodes' spans on one partition intersect, and epochs never go
/// down from one span to the next in start order.
pub fn check(by_partition: &BTreeMap<u32, Vec<Span>>) -> Findings {
    let mut findings = Findings::default();
    for (partition, spans) in by_partition {
        findings.units += spans.len();
        for (i, a) in spans.iter().enumerate() {
            for b in &spans[i + 1..] {
                if b.start >= a.end {
                    break;
                }
                if a.node != b.node {
                    findings.overlaps.push(format!(
                        "p{partition}: {} epoch {} worked over [{}, {}] and {} epoch {} started at {} ({} ms before the first ended)",
                        a.node, a.epoch, a.start, a.end, b.node, b.epoch, b.start,
                        (a.end - b.start) / 1_000_000
                    ));
                }
            }
        }
        let mut highest: Option<&Span> = None;
        for span in spans {
            if let Some(before) = highest {
                if span.epoch < before.epoch {
                    findings.stale_epochs.push(format!(
                        "p{partition}: {} worked under epoch {} at {}, after {} worked under epoch {} at {}",
                        span.node, span.epoch, span.start, before.node, before.epoch, before.start
                    ));
                }
            }
            if highest.is_none_or(|h| span.epoch >= h.epoch) {
                highest = Some(span);
            }
        }
    }
    findings
}

/// The partitions of `0..partitions` with no unit started in `[from, to]`.
pub fn idle(
    by_partition: &BTreeMap<u32, Vec<Span>>,
    partitions: u32,
    from: u128,
    to: u128,
) -> Vec<u32> {
    (0..partitions)
        .filter(|p| {
            !by_partition
                .get(p)
                .is_some_and(|spans| spans.iter().any(|s| s.start >= from && s.start <= to))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(at: u128, node: &str, event: &str, partition: u32, epoch: u64) -> LogLine {
        LogLine {
            at,
            node: node.to_owned(),
            event: event.to_owned(),
            partition,
            epoch,
        }
    }

    /// Fails if two nodes' units that intersect pass, or if touching ones, an abandoned
    /// unit's unsure end, or one node's successive units are taken for an overlap.
    #[test]
    fn overlaps_are_found_and_only_they() {
        let overlapping = [
            line(10, "a", "work", 0, 1),
            line(20, "b", "work", 0, 2),
            line(30, "a", "done", 0, 1),
            line(40, "b", "done", 0, 2),
        ];
        let findings = check(&spans(&overlapping));
        assert_eq!(findings.overlaps.len(), 1, "{findings:?}");
        let fine = [
            line(10, "a", "work", 0, 1),
            line(20, "a", "done", 0, 1),
            line(20, "a", "work", 0, 1),
            line(25, "b", "work", 1, 1),
            line(30, "a", "abandoned", 0, 1),
            line(31, "b", "work", 0, 2),
            line(40, "b", "done", 0, 2),
        ];
        let findings = check(&spans(&fine));
        assert!(findings.safe(), "{findings:?}");
    }

    /// Fails if work under a lower epoch after a higher one passes.
    #[test]
    fn a_stale_epoch_is_found() {
        let stale = [
            line(10, "a", "work", 0, 3),
            line(20, "a", "done", 0, 3),
            line(30, "b", "work", 0, 2),
        ];
        assert_eq!(check(&spans(&stale)).stale_epochs.len(), 1);
    }

    /// Fails if overlapping tenures pass, or if a tenure ended by a conflict is taken as
    /// certain up to the conflict's late notice.
    #[test]
    fn tenures_end_at_their_deadline_or_only_start() {
        let overlapping = [
            line(10, "a", "acquired", 0, 1),
            line(20, "b", "acquired", 0, 2),
            line(25, "a", "expired", 0, 1),
        ];
        let mut findings = Findings::default();
        check_tenures(&tenures(&overlapping), &mut findings);
        assert_eq!(findings.tenure_overlaps.len(), 1, "{findings:?}");
        let late_notice = [
            line(10, "a", "acquired", 0, 1),
            line(20, "b", "acquired", 0, 2),
            line(25, "a", "conflict", 0, 1),
        ];
        let mut findings = Findings::default();
        check_tenures(&tenures(&late_notice), &mut findings);
        assert!(findings.safe(), "{findings:?}");
    }

    /// Fails if a partition worked in the window counts as idle, or one not worked does not.
    #[test]
    fn idle_partitions_are_those_without_a_start_in_the_window() {
        let lines = [line(10, "a", "work", 0, 1), line(50, "a", "work", 1, 1)];
        assert_eq!(idle(&spans(&lines), 3, 20, 60), vec![0, 2]);
    }
}
