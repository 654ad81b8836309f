//! The simulator's negative controls: switches that each break one safety mechanism, so that
//! the simulator can show that its checks catch the breach. Every configuration carries them,
//! all off; only a build with the `negative-controls` feature can turn one on
//! ([`ParticipantConfig::negative_controls_mut`](super::ParticipantConfig)), and
//! [`ParticipantConfig::validate`](super::ParticipantConfig::validate) refuses a
//! configuration with any on.

/// Which safety mechanisms a participant leaves out, for the simulator's negative controls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct NegativeControls {
    /// Take and keep excluded partitions as if the list were empty.
    pub ignore_exclusions: bool,
    /// Write a lease released without waiting for its permits, which lets two nodes work on
    /// one partition at once.
    pub release_ignores_permits: bool,
    /// Join whatever the group record's timings, which lets a node whose timings break the
    /// safety rule against the others' take part.
    pub skip_group_check: bool,
    /// Take a partition under the epoch its record already carries instead of a higher
    /// one, which gives two tenures one fencing token.
    pub reuse_epoch: bool,
    /// With session leases, take a partition from a holder without changing the holder's
    /// session, so the holder's next renewal succeeds and it keeps serving what was taken.
    pub take_ignores_session: bool,
    /// With session leases, take a lease held under a session that has ended at once, with
    /// no wait, so that a paused process whose session another process under its name
    /// replaced still serves what is taken.
    pub take_ended_sessions: bool,
    /// With session leases, do not compare the lease listings read with what is held, so a
    /// record changed behind the holder's back (by a write that left its session alone)
    /// goes unnoticed for as long as its session renews.
    pub ignore_listed_changes: bool,
    /// Take a released record reserved for a node restarting in place as any released
    /// record, with no wait: the restarting node's partitions move while it is away.
    pub ignore_reservations: bool,
}
