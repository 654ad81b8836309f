//! What a participant hands the application: lease guards, loss notices and callbacks.

use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::clock::Clock;
use crate::types::{Epoch, LossReason, PartitionId};

/// Where one tenure of a lease stands on this node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Phase {
    /// Held and open to new work.
    Serving,
    /// Being given up: no new work; the work in flight runs on under its permits until they
    /// are dropped, and only then is the record written released.
    HandingOff,
    /// Over: lost, expired or released. No permit of it is valid any more.
    Ended,
}

impl Phase {
    fn from_u8(value: u8) -> Phase {
        match value {
            0 => Phase::Serving,
            1 => Phase::HandingOff,
            // Only the three discriminants are ever stored; anything else reads as over.
            _ => Phase::Ended,
        }
    }
}

/// One tenure of a lease on this node, shared by the background task, the guards and the
/// permits handed out for it.
///
/// Lease checks read the phase and the deadline without locking, as atomics. Every change
/// to them, and the permit count, happens under `permits`' lock, so that a permit is taken
/// only while the tenure serves, a hand-off sees every permit taken before it, and an ended
/// tenure stays ended with its deadline frozen. The lock is never held across an await.
pub(crate) struct Tenure {
    partition: PartitionId,
    epoch: Epoch,
    clock: Arc<dyn Clock>,
    /// A [`Phase`] as its discriminant.
    phase: AtomicU8,
    /// The deadline, as nanoseconds after `origin`.
    valid_until: AtomicU64,
    /// When new work stopped for a hand-off, as nanoseconds after `origin`; `u64::MAX`
    /// while serving. The drain limit counts from here, not from when the background task,
    /// perhaps held up in slow store calls, first looks at the hand-off.
    handing_off_since: AtomicU64,
    /// No later than any instant this tenure's clock read after the tenure began, so that
    /// a deadline before it (which could only be in the past) is stored as `origin` itself.
    origin: Instant,
    permits: Mutex<usize>,
    /// Wakes the background task when a hand-off may go on: the last permit of a tenure
    /// being handed off was dropped, or a handle asked for a release.
    progress: Arc<Notify>,
    /// Wakes every [`LeaseGuard::lost`] and [`WorkPermit::lost`] waiting on this tenure when
    /// its phase changes.
    phase_changed: Notify,
}

impl Tenure {
    pub(crate) fn new(
        partition: PartitionId,
        epoch: Epoch,
        valid_until: Instant,
        clock: Arc<dyn Clock>,
        progress: Arc<Notify>,
    ) -> Arc<Tenure> {
        let origin = clock.now().min(valid_until);
        Arc::new(Tenure {
            partition,
            epoch,
            clock,
            phase: AtomicU8::new(Phase::Serving as u8),
            valid_until: AtomicU64::new(offset(origin, valid_until)),
            handing_off_since: AtomicU64::new(u64::MAX),
            origin,
            permits: Mutex::new(0),
            progress,
            phase_changed: Notify::new(),
        })
    }

    /// The lock every change to the phase, the deadline or the permit count is made under.
    fn permits_lock(&self) -> MutexGuard<'_, usize> {
        // Every update is a single assignment or increment: a panic cannot leave it half-done.
        self.permits.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn partition(&self) -> PartitionId {
        self.partition
    }

    pub(crate) fn phase(&self) -> Phase {
        Phase::from_u8(self.phase.load(Ordering::Acquire))
    }

    fn set_phase(&self, _lock: &MutexGuard<'_, usize>, phase: Phase) {
        self.phase.store(phase as u8, Ordering::Release);
        self.phase_changed.notify_waiters();
    }

    pub(crate) fn permits(&self) -> usize {
        *self.permits_lock()
    }

    pub(crate) fn valid_until(&self) -> Instant {
        // Stored offsets come from instants that exist and are capped far below overflow.
        self.origin + Duration::from_nanos(self.valid_until.load(Ordering::Acquire))
    }

    /// Whether the deadline is still ahead on this tenure's clock.
    fn before_deadline(&self) -> bool {
        self.clock.now() < self.valid_until()
    }

    /// Moves the deadline after a renewal; an ended tenure stays ended.
    pub(crate) fn extend(&self, valid_until: Instant) {
        let _lock = self.permits_lock();
        if self.phase() != Phase::Ended {
            self.valid_until
                .store(offset(self.origin, valid_until), Ordering::Release);
        }
    }

    /// Stops new work. Returns whether the tenure was serving until now.
    pub(crate) fn hand_off(&self) -> bool {
        let lock = self.permits_lock();
        let serving = self.phase() == Phase::Serving;
        if serving {
            let since = offset(self.origin, self.clock.now());
            self.handing_off_since.store(since, Ordering::Release);
            self.set_phase(&lock, Phase::HandingOff);
        }
        serving
    }

    /// When new work on this tenure stopped for a hand-off, if it has.
    pub(crate) fn handing_off_since(&self) -> Option<Instant> {
        match self.handing_off_since.load(Ordering::Acquire) {
            u64::MAX => None,
            nanos => Some(self.origin + Duration::from_nanos(nanos)),
        }
    }

    /// Ends the tenure: every guard and permit of it is invalid from now on.
    pub(crate) fn end(&self) {
        let lock = self.permits_lock();
        self.set_phase(&lock, Phase::Ended);
    }

    /// A guard on the tenure as it stands now, if it is serving and within its deadline.
    pub(crate) fn guard(self: &Arc<Self>) -> Option<LeaseGuard> {
        let valid_until = self.serving_until()?;
        Some(LeaseGuard {
            tenure: Arc::clone(self),
            valid_until,
        })
    }

    /// The deadline of a tenure open to new work now, which is what a guard is given; `None`
    /// once it is handing off, ended or past its deadline.
    pub(crate) fn serving_until(&self) -> Option<Instant> {
        if self.phase() != Phase::Serving {
            return None;
        }
        let valid_until = self.valid_until();
        (self.clock.now() < valid_until).then_some(valid_until)
    }

    /// A guard for the callbacks, whatever the tenure's phase.
    pub(crate) fn snapshot(self: &Arc<Self>) -> LeaseGuard {
        LeaseGuard {
            tenure: Arc::clone(self),
            valid_until: self.valid_until(),
        }
    }

    /// Resolves once `over` holds for the phase, or the deadline, as renewals move it, has
    /// passed on this tenure's clock.
    async fn until(&self, over: impl Fn(Phase) -> bool) {
        loop {
            // Registered before the phase is read, so that a change in between still wakes it.
            let changed = self.phase_changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if over(self.phase()) || !self.before_deadline() {
                return;
            }
            // Waking at a deadline that a renewal has moved since only goes round again.
            tokio::select! {
                _ = changed => {}
                _ = self.clock.sleep_until(self.valid_until()) => {}
            }
        }
    }

    fn permit(self: &Arc<Self>) -> Option<WorkPermit> {
        let now = self.clock.now();
        let mut permits = self.permits_lock();
        if self.phase() != Phase::Serving || now >= self.valid_until() {
            return None;
        }
        *permits += 1;
        Some(WorkPermit {
            tenure: Arc::clone(self),
        })
    }
}

/// `at` as nanoseconds after `origin`: zero for an instant before it (already past when the
/// tenure began), and capped at [`MAX_OFFSET`].
fn offset(origin: Instant, at: Instant) -> u64 {
    let nanos = at.saturating_duration_since(origin).as_nanos();
    u64::try_from(nanos).unwrap_or(MAX_OFFSET).min(MAX_OFFSET)
}

/// The furthest deadline stored, about 146 years after the tenure began: beyond any lease
/// validity a configuration accepts, and small enough to add to an instant without overflow.
const MAX_OFFSET: u64 = u64::MAX / 4;

/// Proof, checked against the local clock, that this node holds a partition's lease and is
/// open to new work on it.
///
/// Carries the epoch as a fencing token: pass it along with every write to a resource that
/// can remember the highest epoch it accepted per partition, and the resource can refuse a
/// stale owner even after a pause longer than the lease.
///
/// A guard turns invalid at its deadline, and also the moment this node starts giving the
/// lease up for any reason: a release, a drain, a shutdown, a conflict. Check
/// [`LeaseGuard::is_valid`] before starting each unit of work, and hold a [`WorkPermit`]
/// ([`LeaseGuard::permit`]) while the unit runs: a hand-off waits for every permit to be
/// dropped before another node may take the partition.
#[derive(Clone)]
pub struct LeaseGuard {
    tenure: Arc<Tenure>,
    valid_until: Instant,
}

impl LeaseGuard {
    /// The partition this lease is for.
    pub fn partition(&self) -> PartitionId {
        self.tenure.partition
    }

    /// The fencing token of this tenure.
    pub fn epoch(&self) -> Epoch {
        self.tenure.epoch
    }

    /// The instant, on this node's clock, at which the lease ends unless renewed. A guard is
    /// a snapshot: renewals after it was taken do not move this deadline (a permit's
    /// deadline does move with them).
    pub fn valid_until(&self) -> Instant {
        self.valid_until
    }

    /// Whether this node still serves the lease, open to new work, and the deadline is ahead
    /// on its clock.
    pub fn is_valid(&self) -> bool {
        self.tenure.phase() == Phase::Serving && self.tenure.clock.now() < self.valid_until
    }

    /// Time left before the deadline, zero once it has passed.
    pub fn remaining(&self) -> Duration {
        self.valid_until
            .saturating_duration_since(self.tenure.clock.now())
    }

    /// A permit for one unit of work, unless the lease is being given up or has ended.
    /// While any permit of a lease is held, this node does not hand the lease to another
    /// node: a release waits until every permit is dropped, for at most the configured
    /// [`drain_timeout`](crate::ParticipantConfig::drain_timeout), and past it lets the
    /// lease expire rather than release it under running work.
    pub fn permit(&self) -> Option<WorkPermit> {
        self.tenure.permit()
    }

    /// Resolves once this node stops serving the lease: it starts giving it up (a release, a
    /// drain, rebalancing, a shutdown), loses it, or lets its deadline pass unrenewed. Await
    /// it beside the serving work (`tokio::select!`) and stop that work when it resolves.
    ///
    /// It follows the lease, not this guard's snapshot: renewals keep it pending for as long
    /// as the node serves, where [`LeaseGuard::is_valid`] turns false at the deadline the
    /// guard was taken with. Resolves at once if the lease is already over.
    ///
    /// ```
    /// # tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap().block_on(async {
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use leasehold::{admin, MemoryStore, NodeId, Participant, ParticipantConfig, PartitionId};
    ///
    /// let store = Arc::new(MemoryStore::new());
    /// let config = ParticipantConfig::fast(NodeId::new("server-1").unwrap(), 4);
    /// admin::init(&*store, &config.group, 4).await.unwrap();
    /// let participant = Participant::start(store, config, ()).unwrap();
    /// let lease = participant.acquired(PartitionId(1)).await.expect("a lone node takes it");
    ///
    /// let serving = async {
    ///     loop {
    ///         // ... serve partition 1, writing with lease.epoch() as the fencing token ...
    ///         tokio::time::sleep(Duration::from_millis(100)).await;
    ///     }
    /// };
    /// let stopper = participant.clone();
    /// tokio::spawn(async move {
    ///     tokio::time::sleep(Duration::from_secs(30)).await;
    ///     stopper.release(PartitionId(1)).await;
    /// });
    /// tokio::select! {
    ///     _ = lease.lost() => println!("partition 1 is being given up: stop serving it"),
    ///     _ = serving => unreachable!(),
    /// }
    /// assert!(participant.lease(PartitionId(1)).is_none());
    /// participant.shutdown().await;
    /// # });
    /// ```
    pub async fn lost(&self) {
        self.tenure.until(|phase| phase != Phase::Serving).await
    }
}

impl fmt::Debug for LeaseGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaseGuard")
            .field("partition", &self.partition())
            .field("epoch", &self.epoch())
            .field("remaining", &self.remaining())
            .finish()
    }
}

/// A unit of work in progress under a lease: while it is held, this node does not hand the
/// lease off. Drop it as soon as the work ends.
///
/// A permit stays valid through a hand-off, so that work already started can finish, and
/// its deadline moves with every renewal; it is never valid past the lease's deadline on this
/// node's clock, or after the lease was lost. A paused process can still outlive its
/// lease between two checks, which is what the epoch is for: pass it to every resource the
/// work writes.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap().block_on(async {
/// use std::sync::Arc;
/// use std::time::Duration;
/// use leasehold::{admin, MemoryStore, NodeId, Participant, ParticipantConfig, PartitionId};
///
/// let store = Arc::new(MemoryStore::new());
/// let config = ParticipantConfig::fast(NodeId::new("worker-1").unwrap(), 4);
/// admin::init(&*store, &config.group, 4).await.unwrap();
/// let participant = Participant::start(store, config, ()).unwrap();
/// tokio::time::sleep(Duration::from_secs(1)).await;
///
/// // A worker loop: one unit of work at a time, each under its own permit.
/// for _ in 0..3 {
///     let Some(permit) = participant.permit(PartitionId(2)) else {
///         break; // not ours, or being handed off: stop, and let the router send work elsewhere
///     };
///     // ... read input, then write the result with permit.epoch() as the fencing token,
///     // checking permit.is_valid() between steps ...
///     assert!(permit.is_valid());
///     drop(permit); // the unit is done
/// }
/// participant.shutdown().await;
/// # });
/// ```
pub struct WorkPermit {
    tenure: Arc<Tenure>,
}

impl WorkPermit {
    /// The partition the work is on.
    pub fn partition(&self) -> PartitionId {
        self.tenure.partition
    }

    /// The fencing token of the tenure the work runs under.
    pub fn epoch(&self) -> Epoch {
        self.tenure.epoch
    }

    /// The lease's deadline on this node's clock, as of its last renewal.
    pub fn valid_until(&self) -> Instant {
        self.tenure.valid_until()
    }

    /// Whether the work may go on: the lease was not lost and its deadline is ahead on this
    /// node's clock. Stays true while the lease is being handed off, which waits for this
    /// permit.
    pub fn is_valid(&self) -> bool {
        self.tenure.phase() != Phase::Ended && self.tenure.before_deadline()
    }

    /// Time left before the lease's deadline, zero once it has passed or the lease was lost.
    pub fn remaining(&self) -> Duration {
        if self.tenure.phase() == Phase::Ended {
            return Duration::ZERO;
        }
        self.tenure
            .valid_until()
            .saturating_duration_since(self.tenure.clock.now())
    }

    /// Resolves once this permit stops being valid: the lease was lost, or its deadline
    /// passed unrenewed. A hand-off does not end it (the hand-off waits for the permit); to
    /// hear of one, await [`LeaseGuard::lost`]. Resolves at once if the permit is already
    /// invalid.
    pub async fn lost(&self) {
        self.tenure.until(|phase| phase == Phase::Ended).await
    }
}

impl Drop for WorkPermit {
    fn drop(&mut self) {
        let mut permits = self.tenure.permits_lock();
        *permits -= 1;
        if *permits == 0 && self.tenure.phase() == Phase::HandingOff {
            drop(permits);
            self.tenure.progress.notify_one();
        }
    }
}

impl fmt::Debug for WorkPermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkPermit")
            .field("partition", &self.partition())
            .field("epoch", &self.epoch())
            .field("remaining", &self.remaining())
            .finish()
    }
}

/// A lease this node no longer holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loss {
    /// The partition.
    pub partition: PartitionId,
    /// The epoch of the tenure that ended.
    pub epoch: Epoch,
    /// Why it ended.
    pub reason: LossReason,
    /// When this node stopped holding it, on its clock: the deadline for an expiry, the
    /// moment of the decision otherwise.
    pub at: Instant,
}

/// Notifications from a participant to the application.
///
/// Called on the participant's task: keep them short and never block; hand real work to
/// the application's own tasks. A callback that panics is contained: the lease loop logs
/// it, counts it in [`crate::Status::callback_panics`] and carries on.
pub trait Callbacks: Send + Sync + 'static {
    /// This node now holds `lease`: start serving the partition.
    fn on_acquired(&self, lease: &LeaseGuard) {
        let _ = lease;
    }

    /// This node is giving a lease up (rebalancing, a drain, a release, a shutdown): start no
    /// new work on the partition and finish or abandon what runs. `lease` is no longer valid
    /// and gives no new permits; the record is written released once the permits already
    /// taken are dropped, and [`Callbacks::on_lost`] follows.
    fn on_handing_off(&self, lease: &LeaseGuard) {
        let _ = lease;
    }

    /// This node no longer holds a lease: stop serving the partition now. For an expiry this
    /// fires at the deadline even if the store is unreachable.
    fn on_lost(&self, loss: &Loss) {
        let _ = loss;
    }

    /// The current load of a held partition, in any unit the application chooses (requests
    /// per second, bytes, queue depth), published in its lease record at each renewal; the
    /// node's member record carries the sum over its leases. Values that are negative, not
    /// numbers or above [`crate::MAX_LOAD`] are left out, as if unreported.
    fn load(&self, partition: PartitionId) -> Option<f64> {
        let _ = partition;
        None
    }
}

/// No callbacks: the application polls [`crate::Participant::lease`] instead.
impl Callbacks for () {}

/// Shared callbacks: one value serving several participants.
impl<T: Callbacks + ?Sized> Callbacks for Arc<T> {
    fn on_acquired(&self, lease: &LeaseGuard) {
        (**self).on_acquired(lease)
    }

    fn on_handing_off(&self, lease: &LeaseGuard) {
        (**self).on_handing_off(lease)
    }

    fn on_lost(&self, loss: &Loss) {
        (**self).on_lost(loss)
    }

    fn load(&self, partition: PartitionId) -> Option<f64> {
        (**self).load(partition)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::TokioClock;

    const SECOND: Duration = Duration::from_secs(1);

    fn tenure(valid_until: Instant) -> Arc<Tenure> {
        let clock: Arc<dyn Clock> = Arc::new(TokioClock);
        Tenure::new(PartitionId(1), Epoch(3), valid_until, clock, Arc::default())
    }

    /// Deadlines kept as offsets read back exactly; a guard keeps the deadline it was given
    /// while a permit's follows renewals; giving the lease up stops guards at once, permits
    /// only when it ends; an ended tenure's deadline never moves again.
    ///
    /// Fails if the deadline loses precision, a renewal revives an ended tenure, or a phase
    /// change is missed by the lock-free checks.
    #[tokio::test(start_paused = true)]
    async fn lock_free_checks_follow_every_change() {
        let now = Instant::now();
        let tenure = tenure(now + SECOND + Duration::from_nanos(7));
        assert_eq!(tenure.valid_until(), now + SECOND + Duration::from_nanos(7));

        let guard = tenure.guard().expect("serving, within its deadline");
        let permit = guard.permit().expect("serving");
        tenure.extend(now + 2 * SECOND);
        assert_eq!(guard.valid_until(), now + SECOND + Duration::from_nanos(7));
        assert_eq!(permit.valid_until(), now + 2 * SECOND);
        assert_eq!(permit.remaining(), 2 * SECOND);
        assert_eq!(
            (permit.partition(), permit.epoch()),
            (PartitionId(1), Epoch(3))
        );
        let shown = format!("{permit:?}");
        assert!(
            shown.contains("WorkPermit") && shown.contains("epoch: Epoch(3)"),
            "{shown}"
        );
        tokio::time::sleep(SECOND + SECOND / 2).await;
        assert!(!guard.is_valid(), "past the deadline the guard was given");
        assert!(permit.is_valid(), "within the renewed deadline");
        assert!(tenure.guard().is_some());

        assert_eq!(tenure.handing_off_since(), None);
        assert!(tenure.hand_off());
        // The drain timeout counts from here, not from when the lease loop next looks.
        assert_eq!(tenure.handing_off_since(), Some(now + SECOND + SECOND / 2));
        assert!(tenure.guard().is_none());
        assert!(guard.permit().is_none());
        assert!(permit.is_valid(), "a hand-off waits for the work in flight");
        assert_eq!(tenure.permits(), 1);

        tenure.end();
        tenure.extend(now + 3 * SECOND);
        assert_eq!(tenure.valid_until(), now + 2 * SECOND);
        assert!(!permit.is_valid());
        assert_eq!(permit.remaining(), Duration::ZERO);
        drop(permit);
        assert_eq!(tenure.permits(), 0);
    }

    /// Fails if a guard or a permit outlives its lease's deadline while nothing ends the
    /// tenure (a runner stalled or paused past the deadline): the clock alone must stop the
    /// work, at the deadline itself and not an instant later.
    #[tokio::test(start_paused = true)]
    async fn guards_and_permits_turn_invalid_at_the_deadline_by_the_clock_alone() {
        let now = Instant::now();
        let tenure = tenure(now + SECOND);
        let guard = tenure.guard().expect("serving");
        let permit = guard.permit().expect("serving");
        // Paused time moves in whole milliseconds.
        tokio::time::sleep(SECOND - Duration::from_millis(1)).await;
        assert!(
            guard.is_valid() && permit.is_valid(),
            "a millisecond before"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert!(
            !guard.is_valid(),
            "at the deadline, with the tenure never ended"
        );
        assert!(
            !permit.is_valid(),
            "at the deadline, with the tenure never ended"
        );
        assert_eq!(permit.remaining(), Duration::ZERO);
        let shown = format!("{guard:?}");
        assert!(
            shown.contains("partition: PartitionId(1)") && shown.contains("epoch"),
            "{shown}"
        );
    }

    /// A tenure whose deadline had passed when it began never serves.
    ///
    /// Fails if a deadline before the tenure's origin reads as a later one.
    #[tokio::test(start_paused = true)]
    async fn a_deadline_already_past_never_serves() {
        tokio::time::sleep(SECOND).await;
        let tenure = tenure(Instant::now() - SECOND / 2);
        assert!(tenure.guard().is_none());
        assert!(tenure.valid_until() <= Instant::now());
        tenure.extend(Instant::now() - SECOND);
        assert!(tenure.guard().is_none());
    }

    /// Callbacks shared through an `Arc` reach the value inside, each of them.
    ///
    /// Fails if the `Arc` forwarding drops a notification or the load.
    #[tokio::test(start_paused = true)]
    async fn shared_callbacks_reach_the_value_inside() {
        #[derive(Default)]
        struct Recorder(std::sync::Mutex<Vec<&'static str>>);
        impl Callbacks for Recorder {
            fn on_acquired(&self, _: &LeaseGuard) {
                self.0.lock().unwrap().push("acquired");
            }
            fn on_handing_off(&self, _: &LeaseGuard) {
                self.0.lock().unwrap().push("handing off");
            }
            fn on_lost(&self, _: &Loss) {
                self.0.lock().unwrap().push("lost");
            }
            fn load(&self, partition: PartitionId) -> Option<f64> {
                Some(f64::from(partition.0) + 0.5)
            }
        }
        let shared = Arc::new(Recorder::default());
        let tenure = tenure(Instant::now() + SECOND);
        let guard = tenure.guard().expect("serving");
        Callbacks::on_acquired(&shared, &guard);
        Callbacks::on_handing_off(&shared, &guard);
        let loss = Loss {
            partition: PartitionId(1),
            epoch: Epoch(3),
            reason: crate::types::LossReason::Released,
            at: Instant::now(),
        };
        Callbacks::on_lost(&shared, &loss);
        assert_eq!(
            *shared.0.lock().unwrap(),
            ["acquired", "handing off", "lost"]
        );
        assert_eq!(Callbacks::load(&shared, PartitionId(2)), Some(2.5));
    }
}
