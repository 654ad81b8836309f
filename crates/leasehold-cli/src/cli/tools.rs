//! The options of the commands that watch or exercise a fleet: `monitor`, `demo`, `bench`
//! and `sim`.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};
use leasehold::duration::parse_duration;
use leasehold_sim::FaultProfile;

/// Options of `monitor`.
#[derive(Debug, Args)]
pub struct MonitorArgs {
    /// The address to serve the map, /metrics and /api on (HOST:PORT; port 0 picks a free
    /// one, printed on standard output).
    #[arg(long, default_value = "127.0.0.1:9464", value_name = "ADDR")]
    pub listen: String,
    /// How often the table is read; change notices, where the store has them, read it sooner.
    #[arg(long, default_value = "1s", value_parser = parse_duration, value_name = "DURATION")]
    pub interval: Duration,
    /// A held lease or member record unchanged for this long counts as unrenewed or dead;
    /// make it longer than the nodes' heartbeat.
    #[arg(long, default_value = "15s", value_parser = parse_duration, value_name = "DURATION")]
    pub stale_after: Duration,
    /// A file holding a bearer token: with it, the page and /api/actions can drain, undrain,
    /// kick, take offline and put online, each with the token. Without it the monitor is
    /// read-only.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<std::path::PathBuf>,
    /// The expected partition count, so that missing records past the highest one present
    /// are reported too (default: one past the highest partition found).
    #[arg(long)]
    pub partitions: Option<u32>,
}

/// Options of `demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// How many nodes to run (3 to 26).
    #[arg(long, default_value_t = 4)]
    pub nodes: u32,
    /// How many partitions.
    #[arg(long, default_value_t = 32)]
    pub partitions: u32,
    /// Renewal period.
    #[arg(long, default_value = "250ms", value_parser = parse_duration, value_name = "DURATION")]
    pub heartbeat: Duration,
    /// Lease validity.
    #[arg(long, visible_alias = "lease-validity", default_value = "1s", value_parser = parse_duration, value_name = "DURATION")]
    pub validity: Duration,
    /// Wait before taking over an unrenewed lease.
    #[arg(long, default_value = "1500ms", value_parser = parse_duration, value_name = "DURATION")]
    pub acquire_after: Duration,
}

/// Options of `bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Nodes in the fleet (2 to 64).
    #[arg(long, default_value_t = 4)]
    pub nodes: usize,
    /// Partitions in the group.
    #[arg(long, default_value_t = 32)]
    pub partitions: u32,
    /// Repetitions of every change (each run starts a fleet, applies every change, and
    /// deletes the group).
    #[arg(long, default_value_t = 5)]
    pub runs: usize,
    /// The changes to apply, comma-separated, from cold, crash, pause, leave, replace, join,
    /// rolling [default: all]. The fleet always starts cold; it is measured only if listed.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "cold,crash,pause,leave,replace,join,rolling"
    )]
    pub changes: Vec<Change>,
    /// The nodes' renewal period.
    #[arg(long, default_value = "500ms", value_parser = parse_duration, value_name = "DURATION")]
    pub heartbeat: Duration,
    /// The nodes' lease validity.
    #[arg(long, visible_alias = "lease-validity", default_value = "2500ms", value_parser = parse_duration, value_name = "DURATION")]
    pub validity: Duration,
    /// The nodes' wait before taking over an unrenewed lease.
    #[arg(long, default_value = "3s", value_parser = parse_duration, value_name = "DURATION")]
    pub acquire_after: Duration,
    /// The nodes' scan period.
    #[arg(long, default_value = "500ms", value_parser = parse_duration, value_name = "DURATION")]
    pub scan_interval: Duration,
    /// Time limit on each store call of the nodes [default: the heartbeat].
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub store_timeout: Option<Duration>,
    /// How long a paused node stays frozen; longer than the lease validity [default: twice
    /// acquire_after].
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub pause: Option<Duration>,
    /// How long the fleet must stay balanced before a change counts as over [default: two
    /// scans and a heartbeat].
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub quiet: Option<Duration>,
    /// The longest one change may take before the run fails [default: four times
    /// acquire_after plus 20 s].
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub limit: Option<Duration>,
    /// How the bench's group renews its leases, set before any node starts: per-partition
    /// (one store write per lease per heartbeat) or session (one per node per heartbeat).
    #[arg(long, default_value = "per-partition", value_name = "MODE")]
    pub lease_mode: leasehold::LeaseMode,
    /// Once the fleet has settled after the cold start, and before any other change, measure
    /// the store load it makes at rest over this window (0s: not at all; at least a
    /// heartbeat, best a multiple of it). Every node serves its metrics on a loopback port
    /// and is scraped at the window's start and end. Reported per second: store write calls
    /// (put_lease, put_leases, put_member, put_group, delete_lease, delete_member, transact,
    /// each one call whatever it carries) and records written: the lease records sent in
    /// renewal batches (the sum of leasehold_renewal_batch_size), one per single-record write,
    /// and two per transaction (a node's only transaction, a take from a session, writes the
    /// lease record and the holder's session). Calls that failed or timed out are counted;
    /// rows of put_leases batches that are not renewals (takes, hand-offs, load updates) are
    /// not, and such batches are reported apart.
    #[arg(long, default_value = "0s", value_parser = parse_duration, value_name = "DURATION")]
    pub steady: Duration,
    /// Every node stops by restarting in place (`node --restart-in-place`): in a rolling
    /// restart each node is started again as soon as it has exited, and its partitions wait
    /// for it instead of moving. The group's restart window is set to its longest, four
    /// times acquire_after. Without it a stop hands everything off.
    #[arg(long)]
    pub restart_in_place: bool,
    /// Keep every node's log and the fence logs in this directory (default: a temporary
    /// directory, removed at the end).
    #[arg(long, value_name = "DIR")]
    pub logs: Option<PathBuf>,
    /// Print one JSON document (every run's figures and their spreads) instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Options of `sim`. Exits 1 when any invariant is broken.
#[derive(Debug, Clone, Args)]
pub struct SimArgs {
    /// Run this many seeds, from --first-seed on.
    #[arg(long, default_value_t = 100)]
    pub seeds: u64,
    /// The first seed of the batch.
    #[arg(long, default_value_t = 0)]
    pub first_seed: u64,
    /// Replay this one seed and print its figures, or its violation with the events leading
    /// to it.
    #[arg(long, conflicts_with_all = ["seeds", "first_seed"])]
    pub seed: Option<u64>,
    /// Nodes at the start.
    #[arg(long, default_value_t = 5)]
    pub nodes: usize,
    /// Partitions in the group.
    #[arg(long, default_value_t = 64)]
    pub partitions: u32,
    /// Simulated time per seed, e.g. 900s, 15m, 1h: at least the faults' shortest mean
    /// interval plus the fault-free settling window after them (about 4 minutes by default).
    #[arg(long, default_value = "15m", value_parser = parse_duration, value_name = "DURATION")]
    pub duration: Duration,
    /// Faults to inject: all, membership (crashes and churn only) or none.
    #[arg(long, default_value = "all")]
    pub faults: FaultProfile,
    /// How long a settled node goes without reading the lease table (0s: every scan).
    /// Default: the participant's, which depends on the number of partitions.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub relist_after: Option<Duration>,
    /// Negative control: run with acquire_after shorter than the lease validity, which the
    /// single-owner check must catch.
    #[arg(long = "unsafe")]
    pub unsafe_timings: bool,
    /// Negative control: release leases without waiting for the work in flight under them,
    /// which the work-overlap check must catch.
    #[arg(long = "unsafe-release")]
    pub unsafe_release: bool,
    /// Negative control: nodes restarted with timings unsafe against the fleet's skip the
    /// group record's check, which the single-owner check must catch.
    #[arg(long = "unsafe-mixed-timings")]
    pub unsafe_mixed_timings: bool,
    /// Negative control: acquisitions reuse the epoch their record already carries, which
    /// the epoch-order check must catch.
    #[arg(long = "unsafe-epoch-reuse")]
    pub unsafe_epoch_reuse: bool,
    /// Negative control: the fenced resources accept stale epochs, which the fencing check
    /// must catch.
    #[arg(long = "unsafe-stale-fencing")]
    pub unsafe_stale_fencing: bool,
    /// Negative control: once the faults stop, nodes take no more partitions, which the
    /// liveness check must catch.
    #[arg(long = "unsafe-stop-acquiring")]
    pub unsafe_stop_acquiring: bool,
    /// Negative control: node n0 counts no other member, so it never hands off its surplus,
    /// which the balance check must catch.
    #[arg(long = "unsafe-ignore-members")]
    pub unsafe_ignore_members: bool,
    /// Negative control: the operator's destroy neither stops the running nodes nor ends
    /// the sessions of what they hold, and init creates released records, which the
    /// single-owner check must catch.
    #[arg(long = "unsafe-destroy")]
    pub unsafe_destroy: bool,
    /// Negative control: nodes keep and take the partitions their exclusion lists name,
    /// which the exclusion check must catch.
    #[arg(long = "unsafe-ignore-exclusions")]
    pub unsafe_ignore_exclusions: bool,
    /// Negative control: nodes take the partitions reserved for a node restarting in place
    /// at once, which the reservation check must catch.
    #[arg(long = "unsafe-ignore-reservations")]
    pub unsafe_ignore_reservations: bool,
    /// The load on the partitions: none (nodes balance by count), or zipf (each partition's
    /// load from a Zipf distribution, s = 0.6, a tenth of the ranks shuffled every ten
    /// minutes; node capacities and weights 2, 3 and 4 in turn), which nodes report and balance on.
    #[arg(long, default_value = "none", value_parser = ["none", "zipf"])]
    pub load: String,
    /// Restart every node once, one at a time, a third into the run, and report how many
    /// partitions went back to their holders (with --load zipf, under a load that does not
    /// shift).
    #[arg(long)]
    pub rolling_restart: bool,
    /// How the simulated group renews its leases: per-partition (one write per lease per
    /// heartbeat) or session (one write per node per heartbeat).
    #[arg(long, default_value = "per-partition", value_name = "MODE")]
    pub lease_mode: leasehold::LeaseMode,
    /// Negative control for --lease-mode session: a take does not change the holder's
    /// session, so a paused holder renews and keeps serving what was taken, which the
    /// single-owner and work-overlap checks must catch.
    #[arg(long = "unsafe-session-take")]
    pub unsafe_session_take: bool,
    /// Negative control for --lease-mode session: operator commands change a lease without
    /// its holder's session, so the holder keeps serving a kicked or offline partition,
    /// which the single-owner check must catch.
    #[arg(long = "unsafe-session-operator")]
    pub unsafe_session_operator: bool,
    /// Negative control for --lease-mode session: holders do not compare the lease listings
    /// they read with what they hold, so with --unsafe-session-operator a kicked or offline
    /// partition is served on, which the single-owner check must catch.
    #[arg(long = "unsafe-unchecked-holdings")]
    pub unsafe_unchecked_holdings: bool,
    /// Also start, now and then, a second process under the name of a running node whose
    /// first process is paused meanwhile (as an orchestrator replacing a process that stopped
    /// answering does); the first resumes within its lease validity, still holding what it
    /// held; by session it stops by itself when it finds its session replaced, per
    /// partition it is stopped for good acquire_after later.
    #[arg(long)]
    pub twins: bool,
    /// Negative control for --lease-mode session with --twins: leases held under a session
    /// that has ended are taken at once, so the paused first process resumes serving what
    /// another node took, which the single-owner check must catch.
    #[arg(long = "unsafe-session-identity")]
    pub unsafe_session_identity: bool,
    /// With --faults all: leave the dangerous region unexplored. By default each seed draws
    /// its timings near the safety bound (acquire_after just above lease_validity × (1 + ρ)
    /// / (1 − ρ), with ρ and the store time-out drawn), puts clock rates at the drift bound's
    /// edges, and adds the faults that press on it: slow replies (up to beyond the lease
    /// validity), one node's link slowing down and then cut, the store cut from every node.
    /// With this flag, every seed runs the participant's default timings without them.
    #[arg(long = "no-explore")]
    pub no_explore: bool,
    /// OS threads to run seeds on (default: one per core).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// With --seed: print every event of the run as it happens (acquisitions, losses,
    /// releases, every injected fault), not only those leading to a violation.
    #[arg(long, requires = "seed", conflicts_with_all = ["seeds", "first_seed", "json"])]
    pub trace: bool,
}

/// A change the bench applies to a settled fleet of `--nodes` nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Change {
    /// Every node starts at once on a table nobody holds.
    Cold,
    /// One node is killed (SIGKILL): its leases expire and are taken over.
    Crash,
    /// One node is frozen (SIGSTOP) for longer than its leases, then resumed.
    Pause,
    /// One node stops gracefully (SIGTERM) and hands its leases off.
    Leave,
    /// One node stops gracefully and a new one starts at the same moment.
    Replace,
    /// A new node joins and takes its share.
    Join,
    /// Each node in turn stops gracefully and starts again.
    Rolling,
}

impl Change {
    /// Its name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Change::Cold => "cold",
            Change::Crash => "crash",
            Change::Pause => "pause",
            Change::Leave => "leave",
            Change::Replace => "replace",
            Change::Join => "join",
            Change::Rolling => "rolling",
        }
    }
}

/// Options of `fleet`.
#[derive(Debug, Args)]
pub struct FleetArgs {
    /// How many participants to run in this process.
    #[arg(long, default_value_t = 100)]
    pub nodes: u32,
    /// The group's partition count.
    #[arg(long, default_value_t = 1024)]
    pub partitions: u32,
    /// How long to run, from the start of every participant.
    #[arg(long, default_value = "2m", value_parser = parse_duration, value_name = "DURATION")]
    pub duration: Duration,
    /// How the group renews its leases: per-partition or session.
    #[arg(long, default_value = "per-partition", value_name = "MODE")]
    pub lease_mode: leasehold::LeaseMode,
    /// Store clients (connections) the participants share, each used by every N-th
    /// participant [default: one per 16 participants; one for memory:]. A real fleet has a
    /// client per node; shared clients queue the participants' calls, which shows in the
    /// write latency, but a thousand clients may exceed what the server accepts (a
    /// PostgreSQL client holds four connections, and one more for change notices).
    #[arg(long)]
    pub clients: Option<u32>,
    /// Also report the CPU and memory of every process with this command name on this
    /// machine: the store's server (postgres, etcd, java for ZooKeeper).
    #[arg(long, value_name = "NAME")]
    pub server_process: Option<String>,
    /// How often held leases are renewed [default: 10s].
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub heartbeat: Option<Duration>,
    /// How long a renewal keeps a lease valid [default: 30s].
    #[arg(long, visible_alias = "lease-validity", value_parser = parse_duration, value_name = "DURATION")]
    pub validity: Option<Duration>,
    /// How long a record must stay unchanged before it is taken over [default: 45s].
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub acquire_after: Option<Duration>,
    /// How often each participant reads the table [default: 10s].
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub scan_interval: Option<Duration>,
    /// How long a settled participant may go without reading the lease table [default: 0s
    /// up to 4096 partitions, 5m above].
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub relist_after: Option<Duration>,
    /// Time limit on each store call [default: 5s, or the heartbeat if shorter].
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub store_timeout: Option<Duration>,
    /// Print one JSON document instead of text.
    #[arg(long)]
    pub json: bool,
}
