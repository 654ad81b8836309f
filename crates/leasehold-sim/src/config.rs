//! What a simulation runs: fleet size, timings and the faults injected.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use leasehold::NodeId;

use crate::timings::Timings;

/// Which faults a run injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FaultProfile {
    /// Every fault kind: crashes, pauses, lost and delayed replies, outages, throttling,
    /// clock drift, membership churn and operator commands.
    #[default]
    All,
    /// Crashes, restarts and membership churn against a healthy store, no pauses: the clean
    /// setting for failover and hand-off figures.
    Membership,
    /// No faults at all (clock drift stays): a steady fleet.
    None,
}

impl FaultProfile {
    /// The name used on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            FaultProfile::All => "all",
            FaultProfile::Membership => "membership",
            FaultProfile::None => "none",
        }
    }
}

impl fmt::Display for FaultProfile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for FaultProfile {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "all" => Ok(FaultProfile::All),
            "membership" => Ok(FaultProfile::Membership),
            "none" => Ok(FaultProfile::None),
            other => Err(format!(
                "unknown fault profile {other:?}: expected all, membership or none"
            )),
        }
    }
}

/// Rates and sizes of every fault. Mean intervals are for the whole fleet; a zero interval
/// turns that fault off.
#[derive(Debug, Clone, PartialEq)]
pub struct FaultConfig {
    /// Mean time between node crashes (`abort`, no clean-up).
    pub crash_every: Duration,
    /// A crashed node restarts, as a fresh process with the same name, after a time
    /// uniformly up to this.
    pub restart_within: Duration,
    /// Mean time between process pauses.
    pub pause_every: Duration,
    /// A pause lasts between one and this many lease validities.
    pub pause_lease_multiple: f64,
    /// Probability that a write is applied but its reply never arrives.
    pub lost_reply_rate: f64,
    /// Probability that a write is held back and applied later, after newer requests.
    pub delayed_write_rate: f64,
    /// A held-back write is applied after up to this long.
    pub delayed_write_max: Duration,
    /// Probability that a call is applied but its reply comes late.
    pub slow_reply_rate: f64,
    /// A slow reply comes after up to this long: beyond the lease validity, so past the
    /// caller's time limit as well as within it.
    pub slow_reply_max: Duration,
    /// Mean time between one node's link to the store degrading: slow (by up to the store
    /// time-out and beyond, for one to three heartbeats), then cut (both ways, or replies
    /// only) for half a lease to three, then healed. Zero for none.
    pub link_every: Duration,
    /// Whether half the store outages lose requests silently, as a store cut from every
    /// node does, instead of refusing them.
    pub silent_outages: bool,
    /// Mean time between store outages.
    pub outage_every: Duration,
    /// An outage lasts up to this long.
    pub outage_max: Duration,
    /// Probability that a call is refused as throttled.
    pub throttle_rate: f64,
    /// Store round trips take up to this long (uniform).
    pub max_latency: Duration,
    /// Whether each node's clock runs at its own rate within ±ρ.
    pub clock_drift: bool,
    /// Mean time between membership changes: a join, a graceful leave, a drain or an undrain.
    pub churn_every: Duration,
    /// Mean time between operator commands (kick, offline and online, prohibit and allow),
    /// zero for none. Whatever they leave offline or prohibited is undone when the faults
    /// stop, so that liveness and balance are checked on the whole table.
    pub operator_every: Duration,
    /// Probability that a crashed node restarts mis-set: its lease validity and its wait
    /// before taking over both tripled, which is valid on its own but lets it serve a lease
    /// after the others may have taken it. The group record must refuse it; it is started
    /// again with the fleet's timings when the faults stop.
    pub misconfigured_restart_rate: f64,
    /// Mean time between an operator's `destroy --force` of the group under the running
    /// fleet, slow enough for the nodes to scan and take while it runs, followed by `init`.
    /// The destroyed nodes stop, and are started again within `restart_within`.
    pub rebuild_every: Duration,
    /// Mean time between windows in which one node cannot decode another node's member
    /// record (a disk or a codec bug on its side): it must count that member present.
    pub garble_every: Duration,
}

impl FaultConfig {
    /// The faults of `profile`, scaled to `timings`.
    pub fn for_profile(profile: FaultProfile, timings: &Timings) -> FaultConfig {
        let lease = timings.lease_validity;
        let all = FaultConfig {
            crash_every: lease * 4,
            restart_within: lease * 4,
            pause_every: lease * 6,
            pause_lease_multiple: 3.0,
            lost_reply_rate: 0.01,
            delayed_write_rate: 0.01,
            delayed_write_max: timings.heartbeat * 3,
            slow_reply_rate: 0.005,
            slow_reply_max: lease.mul_f64(1.2),
            link_every: lease * 8,
            silent_outages: true,
            outage_every: lease * 10,
            outage_max: lease * 2,
            throttle_rate: 0.03,
            max_latency: Duration::from_millis(30),
            clock_drift: true,
            churn_every: lease * 4,
            operator_every: lease * 6,
            misconfigured_restart_rate: 0.25,
            rebuild_every: lease * 15,
            garble_every: lease * 8,
        };
        match profile {
            FaultProfile::All => all,
            FaultProfile::Membership => FaultConfig {
                pause_every: Duration::ZERO,
                operator_every: Duration::ZERO,
                misconfigured_restart_rate: 0.0,
                rebuild_every: Duration::ZERO,
                garble_every: Duration::ZERO,
                lost_reply_rate: 0.0,
                delayed_write_rate: 0.0,
                slow_reply_rate: 0.0,
                link_every: Duration::ZERO,
                silent_outages: false,
                outage_every: Duration::ZERO,
                throttle_rate: 0.0,
                ..all
            },
            FaultProfile::None => FaultConfig {
                crash_every: Duration::ZERO,
                churn_every: Duration::ZERO,
                ..FaultConfig::for_profile(FaultProfile::Membership, timings)
            },
        }
    }
}

/// One simulation: the fleet, its timings, the faults, and how long to run.
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    /// Nodes at the start (membership churn moves the count around this).
    pub nodes: usize,
    /// Partitions in the group.
    pub partitions: u32,
    /// Simulated time per seed, quiet period included.
    pub duration: Duration,
    /// The named fault profile (used in replay commands).
    pub profile: FaultProfile,
    /// The faults injected.
    pub faults: FaultConfig,
    /// The participants' timings.
    pub timings: Timings,
    /// Start nodes with [`Timings::unsafe_takeover`], bypassing validation: the negative
    /// control, which the single-owner check must catch.
    pub unsafe_timings: bool,
    /// Start nodes that write a lease released without waiting for the permits of the work
    /// in flight, bypassing validation: the negative control, which the work-overlap check
    /// must catch.
    pub unsafe_release: bool,
    /// Negative control: mis-set restarts (see
    /// [`FaultConfig::misconfigured_restart_rate`]) skip the group record's check of their
    /// timings, which lets two nodes hold one partition at once.
    pub unsafe_mixed_timings: bool,
    /// Negative control: acquisitions write the epoch their record already carries instead
    /// of a higher one, so two tenures of one partition share a fencing token; the
    /// epoch-order check must catch it.
    pub unsafe_epoch_reuse: bool,
    /// Negative control: the fenced resources accept work under any epoch, stale ones
    /// included; the fencing check, judging what they accepted, must catch it.
    pub unsafe_stale_fencing: bool,
    /// Negative control: once the faults stop, every node's attempts to take a partition
    /// fail (its connection answers each take as a lost race), as if the nodes had stopped
    /// taking partitions; the liveness check must catch it.
    pub unsafe_stop_acquiring: bool,
    /// Negative control: nodes ignore their exclusion lists, keeping and taking the
    /// partitions the director excludes; the exclusion check must catch it.
    pub unsafe_ignore_exclusions: bool,
    /// Negative control: nodes take a partition reserved for a node restarting in place as
    /// any released one, at once; the reservation check must catch it.
    pub unsafe_ignore_reservations: bool,
    /// Negative control: node `n0` counts no member but itself, so its share is the whole
    /// table and it never hands off a surplus; the balance check must catch it.
    pub unsafe_ignore_members: bool,
    /// Negative control of the destroy: the operator deletes the group's records without
    /// raising its generation or ending the holders' sessions, and creates them again
    /// released, as `destroy` and `init` once did; the single-owner check must catch it.
    pub unsafe_destroy: bool,
    /// How often every node's leases are sampled for the checks, besides at every callback
    /// and store call.
    pub sample_every: Duration,
    /// How often each node submits work to the fenced resource for each partition it holds,
    /// and, twice as often, starts a unit of work under a permit on one of them; zero turns
    /// the workers off (for large runs).
    pub work_every: Duration,
    /// Whether the store pushes change notices (as etcd, ZooKeeper and PostgreSQL can); when
    /// off, nodes learn of changes only by scanning every `scan_interval`.
    pub change_notices: bool,
    /// The load on the partitions, which nodes report and balance on; `None` for a fleet
    /// that reports none and balances by count.
    pub load: Option<crate::load::LoadShape>,
    /// Restart every node once, one at a time, as a rolling update does (graceful stop,
    /// start under the same name, the next once it has joined), a third into the run;
    /// with every fault off, the figures say how many partitions went back to their holder.
    pub rolling_restart: bool,
    /// How the group renews its leases.
    pub lease_mode: leasehold::LeaseMode,
    /// Negative control for session leases: a take does not change the holder's session,
    /// so a holder that was paused renews and keeps serving what was taken; the single-owner
    /// and work-overlap checks must catch it.
    pub unsafe_session_take: bool,
    /// Negative control for session leases: operator commands change a lease without its
    /// holder's session, so the holder never learns of a kick or an offline and keeps
    /// serving while another node takes the partition; the single-owner check must catch it.
    pub unsafe_session_operator: bool,
    /// Negative control for session leases: holders do not compare the lease listings they
    /// read with what they hold, so a record changed by a write that left the holder's
    /// session alone (an operator command with `unsafe_session_operator`) goes unnoticed
    /// while the session renews; the single-owner check must catch it.
    pub unsafe_unchecked_holdings: bool,
    /// Every six lease validities on average, start a second process under the name of a
    /// running node whose first process is paused meanwhile, as an orchestrator replacing a
    /// process that stopped answering does. The first resumes within its lease validity,
    /// still holding what it held. With session leases it stops by itself on finding its
    /// session replaced, and nothing else stops it; renewing per partition it is stopped for
    /// good `acquire_after` after it resumes.
    pub twins: bool,
    /// Negative control for session leases, with `twins`: leases held under a session that
    /// has ended are taken at once, so a paused first process resumes serving what another
    /// node took; the single-owner check must catch it.
    pub unsafe_session_identity: bool,
    /// Explore the dangerous region: draw each seed's timings near the safety bound
    /// ([`crate::explored_timings`]: `acquire_after` just above it for a drift bound drawn
    /// per seed, a store time-out drawn per seed), put clock rates at the drift bound's
    /// edges a third of the time each, and inject the faults that press on the bound: slow
    /// replies, links that slow down and are then cut, silent outages. On for the `all`
    /// profile. Off, every seed runs the timings given with those faults left out, as seeds
    /// found before they existed ran.
    pub explore: bool,
}

impl SimConfig {
    /// `nodes` nodes and `partitions` partitions for `duration` under `profile`, with the
    /// participant's default timings.
    pub fn new(nodes: usize, partitions: u32, duration: Duration, profile: FaultProfile) -> Self {
        let timings = Timings::default();
        SimConfig {
            nodes,
            partitions,
            duration,
            profile,
            faults: FaultConfig::for_profile(profile, &timings),
            timings,
            unsafe_timings: false,
            unsafe_release: false,
            unsafe_mixed_timings: false,
            unsafe_epoch_reuse: false,
            lease_mode: leasehold::LeaseMode::PerPartition,
            unsafe_session_take: false,
            unsafe_session_operator: false,
            unsafe_unchecked_holdings: false,
            twins: false,
            unsafe_session_identity: false,
            unsafe_stale_fencing: false,
            unsafe_stop_acquiring: false,
            unsafe_ignore_members: false,
            unsafe_destroy: false,
            unsafe_ignore_exclusions: false,
            unsafe_ignore_reservations: false,
            sample_every: Duration::from_secs(1),
            work_every: Duration::from_secs(2),
            change_notices: true,
            load: None,
            rolling_restart: false,
            explore: profile == FaultProfile::All,
        }
    }

    /// This configuration as `seed` runs it: with its timings drawn for the seed when
    /// [`SimConfig::explore`] is on, and without the faults that press on the bound when it
    /// is off.
    pub fn for_seed(&self, seed: u64) -> SimConfig {
        if !self.explore {
            return SimConfig {
                faults: FaultConfig {
                    slow_reply_rate: 0.0,
                    link_every: Duration::ZERO,
                    silent_outages: false,
                    ..self.faults.clone()
                },
                ..self.clone()
            };
        }
        SimConfig {
            timings: crate::explore::explored_timings(&self.timings, seed),
            ..self.clone()
        }
    }

    /// The timings nodes actually run with (unsafe ones for the negative control).
    /// The relisting default is resolved for this table's size.
    pub fn effective_timings(&self) -> Timings {
        let mut timings = if self.unsafe_timings {
            self.timings.clone().unsafe_takeover()
        } else {
            self.timings.clone()
        };
        let node = NodeId::new("n").expect("valid");
        timings.relist_after = Some(
            timings
                .participant_config(node, self.partitions)
                .relist_after,
        );
        timings
    }

    /// The fault-free tail of every run, in which the fleet must recover and balance: the
    /// liveness bound plus four scans, the longest a partition may stay unowned once the
    /// faults stop and the time the fleet then has to even out its shares.
    pub fn settle_window(&self) -> Duration {
        let timings = &Timings {
            relist_after: self.effective_timings().relist_after,
            ..self.timings.clone()
        };
        timings.liveness_bound() + timings.scan_interval * 4
    }

    /// When faults stop: late enough to leave time for the liveness and balance checks.
    pub fn quiet_at(&self) -> Duration {
        self.duration.saturating_sub(self.settle_window())
    }

    /// The shortest stretch of faults a run may have: the mean interval of its most frequent
    /// crash, pause, outage, membership change or operator command, so that each seed
    /// expects at least one; zero for a run without any of them.
    pub fn min_fault_window(&self) -> Duration {
        let faults = &self.faults;
        [
            faults.crash_every,
            faults.pause_every,
            faults.outage_every,
            faults.churn_every,
            faults.operator_every,
        ]
        .into_iter()
        .filter(|every| !every.is_zero())
        .min()
        .unwrap_or(Duration::ZERO)
    }

    /// The shortest `duration` this configuration accepts: room for the faults
    /// ([`SimConfig::min_fault_window`]) and the settling window after them
    /// ([`SimConfig::settle_window`]), rounded up to a whole second.
    pub fn min_duration(&self) -> Duration {
        let minimum = self.min_fault_window() + self.settle_window();
        let whole = Duration::from_secs(minimum.as_secs());
        if whole < minimum {
            whole + Duration::from_secs(1)
        } else {
            whole
        }
    }

    /// Checks that the configuration describes a run worth making, naming the offending
    /// values on failure. A run too short for its faults would otherwise pass having
    /// injected none, and one shorter than the settling window would check balance on a
    /// fleet that had no time to settle.
    ///
    /// ```
    /// use std::time::Duration;
    /// use leasehold_sim::{FaultProfile, SimConfig, SimConfigError};
    ///
    /// let config = SimConfig::new(4, 16, Duration::from_secs(90), FaultProfile::All);
    /// let Err(SimConfigError::TooShort { minimum, .. }) = config.validate() else {
    ///     panic!("90 s leaves no room for faults");
    /// };
    /// assert_eq!(minimum, config.min_duration());
    /// assert!(SimConfig { duration: minimum, ..config }.validate().is_ok());
    /// ```
    pub fn validate(&self) -> Result<(), SimConfigError> {
        if self.nodes == 0 {
            return Err(SimConfigError::NoNodes);
        }
        if self.partitions == 0 {
            return Err(SimConfigError::NoPartitions);
        }
        let minimum = self.min_duration();
        if self.duration < minimum {
            return Err(SimConfigError::TooShort {
                duration: self.duration,
                minimum,
                faults: self.min_fault_window(),
                settle: self.settle_window(),
            });
        }
        Ok(())
    }

    /// The command that replays `seed` of this configuration.
    pub fn replay_command(&self, seed: u64) -> String {
        let mut command = format!(
            "leasehold sim --seed {seed} --nodes {} --partitions {} --duration {}s --faults {}",
            self.nodes,
            self.partitions,
            self.duration.as_secs(),
            self.profile
        );
        if let Some(relist_after) = self.timings.relist_after {
            command.push_str(&format!(" --relist-after {}s", relist_after.as_secs_f64()));
        }
        for (on, flag) in [
            (self.unsafe_timings, " --unsafe"),
            (self.unsafe_release, " --unsafe-release"),
            (self.unsafe_mixed_timings, " --unsafe-mixed-timings"),
            (self.unsafe_epoch_reuse, " --unsafe-epoch-reuse"),
            (self.unsafe_stale_fencing, " --unsafe-stale-fencing"),
            (self.unsafe_stop_acquiring, " --unsafe-stop-acquiring"),
            (self.unsafe_ignore_members, " --unsafe-ignore-members"),
            (self.unsafe_destroy, " --unsafe-destroy"),
            (self.unsafe_ignore_exclusions, " --unsafe-ignore-exclusions"),
            (
                self.unsafe_ignore_reservations,
                " --unsafe-ignore-reservations",
            ),
            (self.load.is_some(), " --load zipf"),
            (self.rolling_restart, " --rolling-restart"),
            (
                self.lease_mode == leasehold::LeaseMode::Session,
                " --lease-mode session",
            ),
            (self.unsafe_session_take, " --unsafe-session-take"),
            (self.unsafe_session_operator, " --unsafe-session-operator"),
            (
                self.unsafe_unchecked_holdings,
                " --unsafe-unchecked-holdings",
            ),
            (self.twins, " --twins"),
            (self.unsafe_session_identity, " --unsafe-session-identity"),
            (
                !self.explore && self.profile == FaultProfile::All,
                " --no-explore",
            ),
        ] {
            if on {
                command.push_str(flag);
            }
        }
        command
    }
}

impl Default for SimConfig {
    /// Five nodes, 64 partitions, 15 simulated minutes, every fault.
    fn default() -> Self {
        SimConfig::new(5, 64, Duration::from_secs(15 * 60), FaultProfile::All)
    }
}

/// A [`SimConfig`] that [`SimConfig::validate`] refused, with the offending values.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SimConfigError {
    /// The fleet has no nodes.
    NoNodes,
    /// The group has no partitions.
    NoPartitions,
    /// The run leaves no room for its faults before the settling window.
    TooShort {
        /// The rejected duration.
        duration: Duration,
        /// The shortest accepted.
        minimum: Duration,
        /// The faults' share of the minimum ([`SimConfig::min_fault_window`]).
        faults: Duration,
        /// The settling window's share ([`SimConfig::settle_window`]).
        settle: Duration,
    },
}

impl fmt::Display for SimConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SimConfigError::NoNodes => f.write_str("nodes must be at least 1"),
            SimConfigError::NoPartitions => f.write_str("partitions must be at least 1"),
            SimConfigError::TooShort {
                duration,
                minimum,
                faults,
                settle,
            } if faults.is_zero() => write!(
                f,
                "a run of {}s is too short: it needs the {}s settling window, at least {}s",
                seconds(*duration),
                seconds(*settle),
                seconds(*minimum)
            ),
            SimConfigError::TooShort {
                duration,
                minimum,
                faults,
                settle,
            } => write!(
                f,
                "a run of {}s is too short: it needs at least {}s of faults and the {}s \
                 fault-free settling window after them, at least {}s in all",
                seconds(*duration),
                seconds(*faults),
                seconds(*settle),
                seconds(*minimum)
            ),
        }
    }
}

impl std::error::Error for SimConfigError {}

/// Seconds for a message: whole ones as such, others to a tenth.
fn seconds(duration: Duration) -> String {
    if duration.subsec_nanos() == 0 {
        duration.as_secs().to_string()
    } else {
        format!("{:.1}", duration.as_secs_f64())
    }
}
