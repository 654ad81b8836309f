//! Figures from the fence log, for BENCHMARKS.md: how soon after a node was cut from the
//! store another took over the partitions it lost, and how long before that takeover the
//! cut node had stopped serving (its lease's deadline): the price of the safety margin.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::LogLine;

/// The longest a cut may precede the expiry it caused: validity plus a heartbeat, with room.
const CUT_TO_EXPIRY: u128 = 10_000_000_000;

/// Handovers after expiries, in nanoseconds.
#[derive(Debug, Default)]
pub struct Handovers {
    /// From a node's cut to another node's take of a partition whose lease it then lost.
    pub after_cut: Vec<u128>,
    /// From an expired lease's deadline to the next take of its partition by another node:
    /// how much sooner than needed the holder stopped.
    pub stopped_early_by: Vec<u128>,
}

/// Pairs each `expired` line with the next take of its partition by another node, and
/// with the cut of its node (in `cuts`: node and when) that preceded it, if one did.
pub fn handovers(fence: &[LogLine], cuts: &[(String, u128)]) -> Handovers {
    let mut by_partition: BTreeMap<u32, Vec<&LogLine>> = BTreeMap::new();
    for line in fence {
        by_partition.entry(line.partition).or_default().push(line);
    }
    let mut found = Handovers::default();
    for lines in by_partition.values_mut() {
        lines.sort_by_key(|line| line.at);
        for (index, expiry) in lines.iter().enumerate() {
            if expiry.event != "expired" {
                continue;
            }
            let Some(take) = lines[index..]
                .iter()
                .find(|line| line.event == "acquired" && line.node != expiry.node)
            else {
                continue;
            };
            found
                .stopped_early_by
                .push(take.at.saturating_sub(expiry.at));
            let cut = cuts
                .iter()
                .filter(|(node, at)| {
                    *node == expiry.node && *at <= expiry.at && expiry.at - at <= CUT_TO_EXPIRY
                })
                .map(|(_, at)| *at)
                .max();
            if let Some(cut) = cut {
                found.after_cut.push(take.at.saturating_sub(cut));
            }
        }
    }
    found
}

/// `count, median, largest` of `values`, as durations; `None` when there are none.
pub fn summary(values: &[u128]) -> Option<(usize, Duration, Duration)> {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    let nanos = |n: u128| Duration::from_nanos(u64::try_from(n).unwrap_or(u64::MAX));
    let median = *sorted.get(sorted.len() / 2)?;
    Some((sorted.len(), nanos(median), nanos(*sorted.last()?)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(at: u128, node: &str, event: &str, partition: u32) -> LogLine {
        LogLine {
            at,
            node: node.to_owned(),
            event: event.to_owned(),
            partition,
            epoch: 1,
        }
    }

    /// Fails if an expiry is paired with a take by its own node, with a take of another
    /// partition, or with a cut of another node or one long before.
    #[test]
    fn expiries_are_paired_with_the_next_take_by_another_node() {
        let second = 1_000_000_000;
        let fence = [
            line(second, "a", "acquired", 0),
            line(5 * second, "a", "expired", 0),
            line(6 * second, "a", "acquired", 1),
            line(7 * second, "b", "acquired", 0),
            line(8 * second, "a", "expired", 1),
            line(9 * second, "a", "acquired", 1),
        ];
        let cuts = [
            ("a".to_owned(), 3 * second),
            ("b".to_owned(), 4 * second),
            ("a".to_owned(), 100 * second),
        ];
        let found = handovers(&fence, &cuts);
        assert_eq!(found.stopped_early_by, vec![2 * second]);
        assert_eq!(found.after_cut, vec![4 * second]);
        let (count, median, largest) = summary(&[3, 1, 2]).unwrap();
        assert_eq!(
            (count, median, largest),
            (3, Duration::from_nanos(2), Duration::from_nanos(3))
        );
        assert!(summary(&[]).is_none());
    }
}
