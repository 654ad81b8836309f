//! What the world checks as nodes act: their beliefs whenever it looks, each acquisition
//! and loss their callbacks report, and the work they submit under their leases.

use leasehold::{LeaseGuard, LeaseMode, Loss, LossReason, WorkPermit};
use tokio::time::Instant;

use crate::clock::SimClock;

use super::{Life, Slot, State, World};
use crate::invariants::{exclusions, sessions, Holder, Invariant};

impl World {
    /// Reads `holder`'s current leases and updates its beliefs. Only when they changed since
    /// the last look: a belief ends at its deadline by itself, so an unchanged set of leases
    /// has nothing new to say.
    pub fn sample(&self, state: &mut State, holder: Holder) {
        let now = Instant::now();
        let Some(slot) = state
            .nodes
            .get_mut(&holder.node)
            .filter(|slot| slot.incarnation == holder.incarnation)
        else {
            return;
        };
        let excluded = slot.excluded;
        // A mis-set process (let in only by the mixed-timings control) keeps its leases for
        // its own, longer validity.
        let timings = if slot.misconfigured {
            self.timings.clone().mis_set()
        } else {
            self.timings.clone()
        };
        let Life::Running(process) = &mut slot.life else {
            return;
        };
        // Looked at before any other call of the process's: the store still shows what
        // the process found when it ended its session, held leases or none.
        if self.config.lease_mode == LeaseMode::Session {
            let ended = process.participant.status().sessions_ended;
            if ended > std::mem::replace(&mut process.sessions_ended, ended) {
                self.session_ended(state, holder);
                return self.sample(state, holder);
            }
        }
        let changes = process.participant.lease_changes();
        if process.sampled.replace(changes) == Some(changes) {
            return;
        }
        // A lease being handed off is still this node's: no other may take it until the work
        // in flight under it ends and it is written released.
        let (mut leases, clock) = (process.participant.leases(), process.clock.clone());
        // Serving, not just holding: new work on an excluded partition stops at once.
        let serving_excluded = excluded.filter(|(p, _)| {
            leases
                .binary_search_by_key(p, LeaseGuard::partition)
                .is_ok()
        });
        leases.extend(process.participant.handing_off());
        leases.sort_by_key(LeaseGuard::partition);
        let mut gone = state.beliefs.open_partitions(holder);
        gone.retain(|p| {
            leases
                .binary_search_by_key(p, LeaseGuard::partition)
                .is_err()
        });
        for guard in leases {
            let end = clock.to_true(guard.valid_until());
            let (partition, epoch) = (guard.partition(), guard.epoch());
            if let Err(details) = state.beliefs.believe(holder, partition, epoch, now, end) {
                self.violate(state, Invariant::SingleOwner, details);
            }
            if let Err(details) = exclusions::holding(partition, excluded, end, &timings) {
                self.violate(state, Invariant::Exclusion, format!("{holder} {details}"));
            }
        }
        for partition in gone {
            state.beliefs.disbelieve(holder, partition, now);
        }
        if let Some((partition, since)) = serving_excluded {
            if let Err(details) = exclusions::serving(partition, since, now) {
                self.violate(state, Invariant::Exclusion, format!("{holder} {details}"));
            }
        }
    }

    /// Checks a session end of `holder` against the store as it stands.
    fn session_ended(&self, state: &mut State, holder: Holder) {
        let Some(name) = state.nodes.get(&holder.node).map(|slot| slot.name.clone()) else {
            return;
        };
        let stored = self.store.member_version(&self.group, &name);
        if let Err(details) =
            sessions::ended(holder, stored.as_ref(), state.own_members.get(&holder))
        {
            self.violate(state, Invariant::OwnSession, details);
        }
    }

    pub fn sample_all(&self) {
        let mut state = self.lock();
        let now = Instant::now();
        let fair_share = self.fair_share(&state);
        let holders: Vec<(Holder, usize)> = state
            .nodes
            .iter()
            .filter_map(|(index, slot)| {
                let held = slot.process()?.participant.owned().len();
                Some((slot.holder(*index), held))
            })
            .collect();
        for (holder, held) in holders {
            self.sample(&mut state, holder);
            // A joiner may reach its share without acquiring anything, when other nodes
            // join and the share falls to what it holds.
            state.recorder.holds(holder, now, held, fair_share);
        }
        // A node's first scan ends its joining: only from then on can the others count it.
        let mut joined = false;
        for slot in state.nodes.values_mut() {
            if let Life::Running(process) = &mut slot.life {
                if !process.scanned && process.participant.status().scans > 0 {
                    process.scanned = true;
                    joined = true;
                }
            }
        }
        if joined {
            state.recorder.changed(now);
        }
        state.beliefs.prune(now);
        state.work.prune(now);
    }

    /// ⌊P / N⌋ over the nodes currently serving.
    fn fair_share(&self, state: &State) -> usize {
        self.config.partitions as usize / World::active_count(state).max(1)
    }

    fn active_count(state: &State) -> usize {
        state.nodes.values().filter(|s| s.is_active()).count()
    }

    pub(crate) fn acquired(&self, holder: Holder, guard: &LeaseGuard) {
        let now = Instant::now();
        let (partition, epoch) = (guard.partition(), guard.epoch());
        let mut state = self.lock();
        self.event(
            &mut state,
            format!("{holder} acquired p{partition} epoch={epoch}"),
        );
        state.acquisitions += 1;
        if let Err(details) = state.epochs.acquired(partition, epoch, holder) {
            self.violate(&mut state, Invariant::EpochOrder, details);
        }
        state.fencing.acquired(partition, epoch, holder);
        let excluded = state.nodes.get(&holder.node).and_then(|slot| slot.excluded);
        if let Err(details) = exclusions::acquired(partition, excluded, now) {
            self.violate(
                &mut state,
                Invariant::Exclusion,
                format!("{holder} {details}"),
            );
        }
        state.recorder.changed(now);
        let Some(process) = state
            .nodes
            .get(&holder.node)
            .and_then(Slot::process)
            .cloned()
        else {
            return;
        };
        let end = process.clock.to_true(guard.valid_until());
        if let Err(details) = state.beliefs.believe(holder, partition, epoch, now, end) {
            self.violate(&mut state, Invariant::SingleOwner, details);
        }
        self.sample(&mut state, holder);
        let held = process.participant.owned().len();
        let fair_share = self.fair_share(&state);
        state.recorder.acquired(holder, partition, now);
        state.recorder.holds(holder, now, held, fair_share);
    }

    pub(crate) fn lost(&self, holder: Holder, loss: &Loss) {
        let mut state = self.lock();
        self.event(
            &mut state,
            format!(
                "{holder} lost p{} epoch={} {}",
                loss.partition,
                loss.epoch,
                loss.reason.as_str()
            ),
        );
        self.sample(&mut state, holder);
        state.recorder.changed(Instant::now());
        if loss.reason == LossReason::Released {
            // A release reserving the partition for a restart in place is no hand-off: the
            // partition waits for its node, and no other may take it for a while.
            let restarting = state
                .nodes
                .get(&holder.node)
                .and_then(Slot::process)
                .is_some_and(|process| process.restarting);
            if !restarting {
                state.recorder.released(loss.partition, Instant::now());
                state.load.moved();
            }
        } else if let Some(process) = state.nodes.get(&holder.node).and_then(Slot::process) {
            // A release waits for the permits, so only the other losses can cut work short.
            let at = process.clock.to_true(loss.at);
            state.work.lost(holder, loss.partition, loss.epoch, at);
        }
    }

    /// A unit of work of `holder`, started at `start` under `permit`, has ended now.
    pub fn unit_done(&self, holder: Holder, permit: &WorkPermit, start: Instant, clock: &SimClock) {
        let now = Instant::now();
        let ran_out = (!permit.is_valid()).then(|| clock.to_true(permit.valid_until()));
        let mut state = self.lock();
        let (partition, epoch) = (permit.partition(), permit.epoch());
        let outcome = state
            .work
            .unit(holder, partition, epoch, start, now, ran_out);
        if let Err(details) = outcome {
            self.violate(&mut state, Invariant::WorkOverlap, details);
        }
    }

    /// Work from `holder` under the leases it checked a cycle ago: each partition's resource
    /// takes or refuses it by its own rule, and the fencing check then judges what the
    /// resources recorded, without relying on that rule.
    pub fn submit(&self, holder: Holder, guards: &[LeaseGuard]) {
        let mut state = self.lock();
        let state = &mut *state;
        for guard in guards {
            let (partition, epoch) = (guard.partition(), guard.epoch());
            if !state.resources.offer(partition, epoch, holder) {
                let text = format!("{holder} work on p{partition} epoch={epoch} refused as stale");
                self.event(state, text);
            }
        }
        for offer in state.resources.take_record() {
            if let Err(details) = state.fencing.judge(&offer) {
                self.violate(state, Invariant::Fencing, details);
            }
        }
    }
}
