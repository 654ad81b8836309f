//! The figures of a read: the summary bar and `/metrics` counts, the member rows, and the
//! history the page draws.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use leasehold::planner::{fair_targets, MemberShare};
use tokio::time::Instant;

use super::{HistorySample, Member, MemberRow, Summary, Tracker, HISTORY_EVERY, HISTORY_KEPT};

impl Tracker {
    pub(super) fn summarize(&mut self, now: Instant, corrupt: u64, epochs_back: u64) {
        let mut s = Summary {
            corrupt,
            epochs_back,
            ..Summary::default()
        };
        let mut held_by: HashMap<i32, u32> = HashMap::new();
        for cell in self
            .cells
            .iter()
            .filter(|c| c.state == b'H' && c.owner >= 0)
        {
            *held_by.entry(cell.owner).or_default() += 1;
        }
        let mut oldest = Duration::ZERO;
        // With session leases, a held lease is as fresh as its holder's last renewal.
        let renewed_at: HashMap<i32, &Member> = if self.session {
            self.members
                .iter()
                .filter_map(|(node, m)| Some((*self.index.get(node.as_str())?, m)))
                .collect()
        } else {
            HashMap::new()
        };
        // Members that could take another partition: live, not draining, below their cap.
        let takers: BTreeSet<&str> = self
            .members
            .iter()
            .filter(|(_, m)| m.live && !m.draining && m.weight > 0)
            .filter(|(node, m)| {
                let held = self
                    .index
                    .get(node.as_str())
                    .and_then(|i| held_by.get(i))
                    .copied()
                    .unwrap_or(0);
                m.max_partitions.is_none_or(|cap| held < cap)
            })
            .map(|(node, _)| node.as_str())
            .collect();
        for (p, cell) in self.cells.iter().enumerate() {
            s.prohibited_pairs += cell.prohibited.len() as u64;
            match cell.state {
                b'H' if cell.owner >= 0 => {
                    s.held += 1;
                    let since = match renewed_at.get(&cell.owner) {
                        // Taken under a session that has ended: renewed by none since the
                        // next one was first seen.
                        Some(member)
                            if cell.session.is_some()
                                && member.session.is_some()
                                && cell.session != member.session =>
                        {
                            cell.changed_at.max(member.session_since)
                        }
                        Some(member) => cell.changed_at.max(member.changed_at),
                        None => cell.changed_at,
                    };
                    let age = now.saturating_duration_since(since);
                    oldest = oldest.max(age);
                    if age >= self.stale_after {
                        s.unrenewed += 1;
                        self.unrenewed.push(p as u32);
                    }
                }
                b'H' | b'R' => {
                    if cell.state == b'H' {
                        s.held += 1;
                    } else {
                        s.released += 1;
                    }
                    // A released cell names an owner only while reserved for it.
                    if cell.state == b'R' && cell.owner >= 0 {
                        s.reserved += 1;
                        // Twice the window, from when this monitor first saw the
                        // reservation: the others count from when they first see it too,
                        // and take it at their next scan after the window.
                        let seen_for = now.saturating_duration_since(cell.changed_at);
                        if self.restart_window.is_some_and(|w| seen_for > 2 * w) {
                            s.reservations_run_out += 1;
                        }
                    }
                    s.unowned += 1;
                    let permitted = takers
                        .iter()
                        .any(|node| !cell.prohibited.iter().any(|p| p.as_str() == *node));
                    if !permitted {
                        s.spillover += 1;
                    }
                }
                b'O' => s.offline += 1,
                b'M' => s.missing += 1,
                _ => {}
            }
        }
        s.oldest_unrenewed_s = oldest.as_secs_f64();
        let shares: Vec<MemberShare> = self
            .members
            .iter()
            .filter(|(_, m)| m.live)
            .map(|(node, m)| MemberShare {
                node: node.clone(),
                weight: m.weight,
                draining: m.draining,
            })
            .collect();
        let available = (self.cells.len() as u64 - s.offline - s.missing) as u32;
        let targets = fair_targets(available, &shares, u32::MAX);
        self.rows = self
            .members
            .iter()
            .map(|(node, m)| MemberRow {
                node: node.to_string(),
                held: self
                    .index
                    .get(node.as_str())
                    .and_then(|i| held_by.get(i))
                    .copied()
                    .unwrap_or(0),
                target: targets.get(node).copied().unwrap_or(0),
                weight: m.weight,
                draining: m.draining,
                live: m.live,
                load: m.load,
                heartbeat: m.heartbeat,
                last_change_ms_ago: now.saturating_duration_since(m.changed_at).as_millis() as u64,
            })
            .collect();
        // A dead member's load is what it carried when it stopped; its partitions are on
        // their way to the others, whose own records will show any excess.
        s.load_spillover = self
            .members
            .values()
            .filter(|m| m.live)
            .filter_map(|m| Some((m.load? - m.max_load?).max(0.0)))
            .sum();
        s.live_members = self.members.values().filter(|m| m.live).count() as u64;
        s.dead_members = self.members.len() as u64 - s.live_members;
        s.draining_members = self.members.values().filter(|m| m.draining).count() as u64;
        self.summary = s;
    }

    pub(super) fn sample_history(&mut self, now: Instant, unix_ms: u64) {
        if self
            .last_sample
            .is_some_and(|last| now.saturating_duration_since(last) < HISTORY_EVERY)
        {
            return;
        }
        self.last_sample = Some(now);
        if self.history.len() == HISTORY_KEPT {
            self.history.pop_front();
        }
        self.history.push_back(HistorySample {
            at_unix_ms: unix_ms,
            held: self
                .held_per_member()
                .map(|(node, held)| (node.to_string(), held))
                .collect(),
        });
    }
}
