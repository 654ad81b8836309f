//! **Reservations.** A partition that a node restarting in place left reserved for its name
//! ([`leasehold::LeaseRecord::is_reserved`]) is taken by no other node until the group's
//! restart window has passed since the reserved record landed. The others count the window
//! from when they first see the record, on clocks that may run fast by the drift bound ρ, so
//! the earliest a faithful taker can write is `landed + window × (1 − ρ)`. The name it is
//! reserved for may take it at any time (another process under the name too: a restart, or a
//! twin).
//!
//! Checked at the lease writes the store applies, from its change notices. A notice the
//! store drops when the checker falls behind (its feed is bounded) leaves that write unseen:
//! mostly that hides a violation, but a take right after an unseen write that freed a
//! reservation (an operator's kick) would look early. The feed is read at the instant of each
//! write in simulated time, so it falls behind only within one instant. Caught by the
//! negative control that takes reserved records as plain released ones
//! (`SimConfig::unsafe_ignore_reservations`).

use std::collections::BTreeMap;
use std::time::Duration;

use leasehold::{LeaseRecord, LeaseState, NodeId, PartitionId, Version};
use tokio::time::Instant;

/// The reservations in force, as the store's writes made them.
#[derive(Debug, Default)]
pub struct Reservations {
    /// Each reserved partition: the name it is reserved for, the version of the reserved
    /// record, and when that version landed.
    reserved: BTreeMap<PartitionId, (NodeId, Version, Instant)>,
}

impl Reservations {
    /// Whether any partition is reserved now.
    pub fn is_empty(&self) -> bool {
        self.reserved.is_empty()
    }

    /// Whether `partition` is reserved now.
    pub fn contains(&self, partition: PartitionId) -> bool {
        !self.reserved.is_empty() && self.reserved.contains_key(&partition)
    }

    /// The partitions reserved now.
    pub fn partitions(&self) -> Vec<PartitionId> {
        self.reserved.keys().copied().collect()
    }

    /// The record of `partition` is `stored` (`None`: deleted) at `now`, `window` being the
    /// group's restart window and `rho` its drift bound. Fails if another node took a
    /// partition reserved for a name before the window could have passed for it.
    pub fn written(
        &mut self,
        partition: PartitionId,
        stored: Option<(&LeaseRecord, &Version)>,
        now: Instant,
        window: Duration,
        rho: f64,
    ) -> Result<(), String> {
        let Some((record, version)) = stored else {
            self.reserved.remove(&partition);
            return Ok(());
        };
        if let Some(owner) = record.reserved_for() {
            let owner = owner.clone();
            let same = self
                .reserved
                .get(&partition)
                .is_some_and(|(_, seen, _)| seen == version);
            if !same {
                self.reserved
                    .insert(partition, (owner, version.clone(), now));
            }
            return Ok(());
        }
        let Some((reserved_for, _, landed)) = self.reserved.remove(&partition) else {
            return Ok(());
        };
        let taker = record
            .owner
            .as_ref()
            .filter(|_| record.state == LeaseState::Held);
        let earliest = landed + window.mul_f64(1.0 - rho);
        match taker {
            Some(taker) if *taker != reserved_for && now < earliest => Err(format!(
                "{taker} took p{partition}, reserved for {reserved_for}, {:?} after the \
                 reservation landed (window {window:?})",
                now - landed
            )),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str) -> NodeId {
        NodeId::new(name).unwrap()
    }

    fn held_by(name: &str) -> LeaseRecord {
        LeaseRecord {
            owner: Some(node(name)),
            state: LeaseState::Held,
            ..LeaseRecord::default()
        }
    }

    #[test]
    fn only_another_name_taking_within_the_window_is_a_violation() {
        let window = Duration::from_secs(30);
        let start = Instant::now();
        let p = PartitionId(3);
        let mut reserved = LeaseRecord::released();
        reserved.reserve_for(&node("a"));
        let check = |taker: &str, after: Duration| {
            let mut reservations = Reservations::default();
            let v1 = Version::from_number(1);
            let v2 = Version::from_number(2);
            reservations
                .written(p, Some((&reserved, &v1)), start, window, 0.01)
                .unwrap();
            assert!(!reservations.is_empty());
            let taken = held_by(taker);
            let result = reservations.written(p, Some((&taken, &v2)), start + after, window, 0.01);
            assert!(reservations.is_empty());
            result
        };
        assert!(check("b", Duration::from_secs(10)).is_err());
        assert!(check("a", Duration::from_secs(10)).is_ok());
        assert!(check("b", Duration::from_secs(30)).is_ok());
        // Within the drift allowance: a fast clock may count the window short.
        assert!(check("b", Duration::from_millis(29_800)).is_ok());
        assert!(check("b", Duration::from_millis(29_600)).is_err());
    }

    #[test]
    fn a_rewrite_of_the_reservation_counts_from_its_own_landing() {
        let window = Duration::from_secs(30);
        let start = Instant::now();
        let p = PartitionId(0);
        let mut reserved = LeaseRecord::released();
        reserved.reserve_for(&node("a"));
        let mut reservations = Reservations::default();
        let (v1, v2, v3) = (
            Version::from_number(1),
            Version::from_number(2),
            Version::from_number(3),
        );
        reservations
            .written(p, Some((&reserved, &v1)), start, window, 0.0)
            .unwrap();
        let later = start + Duration::from_secs(20);
        reservations
            .written(p, Some((&reserved, &v2)), later, window, 0.0)
            .unwrap();
        let taken = held_by("b");
        let at = start + Duration::from_secs(40);
        assert!(reservations
            .written(p, Some((&taken, &v3)), at, window, 0.0)
            .is_err());
        // A deleted record ends its reservation.
        reservations
            .written(p, Some((&reserved, &v1)), start, window, 0.0)
            .unwrap();
        reservations.written(p, None, start, window, 0.0).unwrap();
        assert!(reservations.is_empty());
    }
}
