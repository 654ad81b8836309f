//! The command line, as clap derive types.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use leasehold::{GroupName, NodeId};
use leasehold_sim::FaultProfile;

use leasehold::duration::{self, parse_duration};
use leasehold_process::store_url::{InvalidStoreUrl, StoreUrl, DEFAULT_STORE};

/// Lease-based partitioning: divide N partitions among servers so that no partition is ever
/// served by two at once.
///
/// Exit codes: 0 success, 1 problems found (stale), a demo check failed or a simulated
/// invariant was broken, 2 error.
#[derive(Debug, Parser)]
#[command(
    name = "leasehold",
    version,
    long_version = crate::version::long_version(),
    after_help = duration::help()
)]
pub struct Cli {
    /// The store holding the lease table: sqlite:PATH (relative to the current directory),
    /// sqlite:///ABSOLUTE/PATH, memory: (private to this process; for demo and tests),
    /// postgres://USER@HOST:PORT/DATABASE (?sslmode=require for TLS, CA in PGSSLROOTCERT),
    /// etcd://HOST:PORT[,HOST:PORT]/PREFIX or etcd+https://… (CA in LEASEHOLD_ETCD_CA,
    /// client certificate in LEASEHOLD_ETCD_CERT and LEASEHOLD_ETCD_KEY),
    /// zk://HOST:PORT[,HOST:PORT]/PREFIX, azure://ACCOUNT/TABLE or
    /// azure+http(s)://HOST:PORT/ACCOUNT/TABLE (key in LEASEHOLD_AZURE_KEY, CA for https in
    /// LEASEHOLD_AZURE_CA)
    /// [default: sqlite:leasehold.db; for demo, a file in a temporary directory]
    #[arg(long, global = true, env = "LEASEHOLD_STORE", value_name = "URL")]
    pub store: Option<String>,

    /// The group: one independent lease table inside the store.
    #[arg(
        long,
        global = true,
        env = "LEASEHOLD_GROUP",
        default_value = "default"
    )]
    pub group: GroupName,

    /// Time limit on each store call made by operator commands.
    #[arg(long, global = true, default_value = "5s", value_parser = parse_duration, value_name = "DURATION")]
    pub timeout: Duration,

    /// How logs are written to standard error: text for people, or json (one object a line,
    /// with a timestamp, level, target and fields) for a log collector.
    #[arg(
        long,
        global = true,
        env = "LEASEHOLD_LOG_FORMAT",
        value_enum,
        default_value_t = LogFormat::Text
    )]
    pub log_format: LogFormat,

    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// How logs are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// One line of text per event, coloured on a terminal.
    Text,
    /// One JSON object per line.
    Json,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create the group's lease records 0..N (initial build-out). Never changes the count of
    /// an existing group.
    Init {
        /// How many partitions the group has.
        #[arg(long)]
        partitions: u32,
        /// The timings every node must fit (otherwise the first node to join sets them).
        #[command(flatten)]
        timings: TimingArgs,
        /// How the group renews its leases: per-partition (one store write per lease per
        /// heartbeat) or session (one per node per heartbeat; see docs/session-leases.md).
        #[arg(long, value_name = "MODE")]
        lease_mode: Option<leasehold::LeaseMode>,
    },
    /// Show how the group renews its leases, or change it: per-partition or session.
    /// Refused while member records are present: stop every node first.
    LeaseMode {
        /// The new mode; without it, the current one is shown.
        mode: Option<leasehold::LeaseMode>,
    },
    /// Delete every lease and member record of the group. The group record stays, so a
    /// group built out again issues fencing tokens above every earlier one.
    Destroy {
        /// Confirm the deletion.
        #[arg(long)]
        yes: bool,
        /// Delete even while member records are present (nodes that may be running).
        #[arg(long)]
        force: bool,
    },
    /// Show the group record (record format, the timings every node must fit, epoch floor),
    /// or change its timings with --lease-validity and --acquire-after. A change is made
    /// only if every member's timings fit the new ones.
    #[command(after_help = duration::help())]
    Timings(TimingsArgs),
    /// Show the lease table: owner, epoch, state, prohibited nodes, note, version, age.
    Status(StatusArgs),
    /// Sample the table twice and report problems: unrenewed leases, unowned, missing or
    /// corrupt partitions, too few live nodes. Exit 0 healthy, 1 problems, 2 could not check.
    #[command(after_help = duration::help())]
    Stale(StaleArgs),
    /// Make the holder of a partition drop it; another node takes it after acquire_after.
    Kick {
        /// The partition.
        partition: u32,
    },
    /// Keep a node off a partition (its holder drops it if that is the node).
    Prohibit {
        /// The partition.
        partition: u32,
        /// The node to keep off.
        node: NodeId,
    },
    /// Let a node take a partition again.
    Allow {
        /// The partition.
        partition: u32,
        /// The node to allow.
        node: NodeId,
    },
    /// Take a partition out of service: nobody holds it until `online`.
    Offline {
        /// The partition.
        partition: u32,
    },
    /// Put an offline partition back in service.
    Online {
        /// The partition.
        partition: u32,
    },
    /// Ask a node to hand all its partitions off (cooperatively, no expiry).
    Drain {
        /// The node.
        node: NodeId,
    },
    /// Let a drained node take partitions again.
    Undrain {
        /// The node.
        node: NodeId,
    },
    /// Run one participant until SIGTERM or SIGINT, then release its leases and exit.
    #[command(after_help = duration::help())]
    Node(Box<NodeArgs>),
    /// Run one participant, as `node` does, with an HTTP/JSON API for a worker in any
    /// language on this host: leases, work permits, release, drain, routing and lease events.
    #[command(after_help = duration::help())]
    Agent(Box<AgentArgs>),
    /// Watch the table without joining the group: a live map of the fleet in the browser,
    /// its health as Prometheus metrics, and the same data as JSON and a stream of changes.
    #[command(after_help = duration::help())]
    Monitor(MonitorArgs),
    /// Run a self-contained demonstration: several nodes in this process, a crash, a drain.
    #[command(after_help = duration::help())]
    Demo(DemoArgs),
    /// Measure a fleet of real `leasehold node` processes on the store through cold start,
    /// crash, pause, leave, replacement, join and rolling restart: time until every partition
    /// is owned again, unowned partition-seconds, moves, expiries and double owners, from the
    /// nodes' fence logs. Run it to choose timings for a store. It builds and deletes its
    /// own group (--group), and refuses one that has records. Exit 0 when every change
    /// completed with no double owner, 1 otherwise.
    #[command(after_help = duration::help())]
    Bench(Box<BenchArgs>),
    /// Run the deterministic simulation: real participants in virtual time under injected
    /// faults (crashes, pauses, lost and delayed replies, outages, throttling, clock drift,
    /// churn), checking that no partition ever has two owners. A failing seed prints the
    /// command that replays it.
    #[command(after_help = duration::help())]
    Sim(Box<SimArgs>),
    /// Print a completion script for a shell: `leasehold completions bash >
    /// /usr/share/bash-completion/completions/leasehold`.
    Completions {
        /// The shell: bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Write the manual pages, leasehold.1 and one per command (leasehold-node.1, …), into a
    /// directory (what packages install).
    #[command(hide = true)]
    ManPages {
        /// Where to write them; created if missing.
        directory: std::path::PathBuf,
    },
}

/// Timings for the group record.
#[derive(Debug, Args)]
pub struct TimingArgs {
    /// The longest any node may keep a lease after the renewal that wrote it.
    #[arg(long, visible_alias = "validity", value_parser = parse_duration, value_name = "DURATION", requires = "acquire_after")]
    pub lease_validity: Option<Duration>,
    /// The shortest any node may wait on an unchanged record before taking it.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", requires = "lease_validity")]
    pub acquire_after: Option<Duration>,
    /// Bound on clock-rate drift between nodes [default: 0.01].
    #[arg(long, requires = "lease_validity")]
    pub max_clock_drift: Option<f64>,
}

impl TimingArgs {
    /// The timings given, if any.
    pub fn timings(&self) -> Option<leasehold::GroupTimings> {
        Some(leasehold::GroupTimings {
            lease_validity: self.lease_validity?,
            acquire_after: self.acquire_after?,
            max_clock_drift: self.max_clock_drift.unwrap_or(0.01),
        })
    }
}

/// Options of `timings`.
#[derive(Debug, Args)]
pub struct TimingsArgs {
    /// The new timings; without them, the group record is shown.
    #[command(flatten)]
    pub timings: TimingArgs,
    /// Change them even if members publish no timings or do not fit (only for members known
    /// to be stopped).
    #[arg(long, requires = "lease_validity")]
    pub force: bool,
    /// Print one JSON document instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Options of `status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Group partitions by owner, with each member's record.
    #[arg(long, conflicts_with = "partition")]
    pub by_node: bool,
    /// Show only this partition.
    #[arg(long)]
    pub partition: Option<u32>,
    /// Show only the partitions held by this node, and its member record.
    #[arg(long, conflicts_with_all = ["partition", "by_node"])]
    pub node: Option<NodeId>,
    /// Print one JSON document instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Options of `stale`.
#[derive(Debug, Args)]
pub struct StaleArgs {
    /// Time between the two samples; make it longer than the nodes' heartbeat.
    #[arg(long, default_value = "15s", value_parser = parse_duration, value_name = "DURATION")]
    pub watch: Duration,
    /// Report a problem when fewer nodes than this renewed their member record.
    #[arg(long, default_value_t = 1)]
    pub min_nodes: usize,
    /// The expected partition count (default: one past the highest partition found).
    #[arg(long)]
    pub partitions: Option<u32>,
    /// Print one JSON document instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Parses `KEY=VALUE` for `--meta`.
fn parse_meta(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_string(), value.to_string())),
        _ => Err(format!("{text:?} is not KEY=VALUE")),
    }
}

/// Options of `agent`.
#[derive(Debug, Args)]
pub struct AgentArgs {
    /// The node's options, as `node` takes them.
    #[command(flatten)]
    pub node: NodeArgs,
    /// The address to serve the API on (HOST:PORT; port 0 picks a free one, printed on
    /// standard output). A non-loopback address needs --token-file.
    #[arg(long, default_value = "127.0.0.1:7464", value_name = "ADDR")]
    pub listen: String,
    /// A file holding a bearer token that permits, releases and drains must carry.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<std::path::PathBuf>,
}

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

/// Options of `node`.
#[derive(Debug, Clone, Args)]
pub struct NodeArgs {
    /// This node's name, unique in the group.
    #[arg(long)]
    pub id: NodeId,
    /// How many partitions the group has. Default: the group's existing count. If the group
    /// does not exist yet, it is created with this count.
    #[arg(long)]
    pub partitions: Option<u32>,
    /// How often held leases are renewed [default: 10s].
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub heartbeat: Option<Duration>,
    /// How long a renewal keeps a lease valid [default: 30s].
    #[arg(long, visible_alias = "lease-validity", value_parser = parse_duration, value_name = "DURATION")]
    pub validity: Option<Duration>,
    /// How long a record must stay unchanged before this node takes it over [default: 45s].
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub acquire_after: Option<Duration>,
    /// How often the whole table is read [default: 10s].
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub scan_interval: Option<Duration>,
    /// Time limit on each store call [default: 5s, or the heartbeat if shorter].
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub store_timeout: Option<Duration>,
    /// The most partitions this node will hold [default: all].
    #[arg(long)]
    pub max_partitions_per_node: Option<u32>,
    /// This node's relative capacity [default: 1].
    #[arg(long)]
    pub weight: Option<u32>,
    /// This node's capacity for load, relative to the others', when the application reports
    /// load [default: its weight].
    #[arg(long)]
    pub capacity: Option<f64>,
    /// Hand off the hottest partitions others have room for while this node's load is above
    /// this [default: none].
    #[arg(long)]
    pub max_load: Option<f64>,
    /// How far above its fair share of the load a node may go before partitions move
    /// [default: 1.10].
    #[arg(long)]
    pub load_band: Option<f64>,
    /// The fraction of the table the group may move to balance load per --churn-window
    /// [default: 0.10].
    #[arg(long)]
    pub churn_budget: Option<f64>,
    /// The window the churn budget counts over [default: 10m].
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub churn_window: Option<Duration>,
    /// Delete member records unchanged for this long: nodes that crashed and never came
    /// back [default: 1h].
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub forget_members_after: Option<Duration>,
    /// How long a settled node may go without reading the lease table; 0s reads it every
    /// scan [default: 0s up to 4096 partitions, 5m above].
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub relist_after: Option<Duration>,
    /// How long giving a lease up (rebalancing, a drain, SIGTERM) waits for the work in
    /// flight under it before letting the lease expire instead [default: 30s].
    #[arg(long, value_parser = parse_duration, value_name = "DURATION")]
    pub drain_timeout: Option<Duration>,
    /// Append `<unix_ns> <node> <event> <partition> <epoch>` lines here, one per lease
    /// gained or given up: `acquired`, `released` (handed off), `expired` (ran out
    /// unrenewed; the time is the deadline), `conflict` (another write ended it), `changed`
    /// (a listing showed the record changed behind this node's back) or `stopped` (the
    /// lease loop ended).
    #[arg(long, value_name = "FILE")]
    pub fence_log: Option<PathBuf>,
    /// Append `<unix_ns> <node> work <partition> <epoch>` for each partition held, every
    /// --work-interval. With --work-duration, each line starts a unit of work that holds a
    /// work permit for that long and ends with a `done` line, or `abandoned` if the lease
    /// ran out under it.
    #[arg(long, value_name = "FILE", requires = "work_interval")]
    pub work_log: Option<PathBuf>,
    /// How often to write work lines, or to start a unit on each partition with none running.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", requires = "work_log")]
    pub work_interval: Option<Duration>,
    /// How long each unit of work holds its permit; a hand-off of the partition waits for it.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", requires = "work_log")]
    pub work_duration: Option<Duration>,
    /// Serve Prometheus metrics at http://ADDR/metrics, and /healthz, on this address
    /// (HOST:PORT; port 0 picks a free one, printed on standard output).
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<String>,
    /// The URL this node serves clients on, published in its member record: routers return
    /// it with the owner of a key, and `status` shows it.
    #[arg(long, value_name = "URL")]
    pub advertise: Option<String>,
    /// A label published with the member record, as KEY=VALUE (repeat for more; up to 16).
    #[arg(long = "meta", value_name = "KEY=VALUE", value_parser = parse_meta)]
    pub meta: Vec<(String, String)>,
    /// Partitions this node never takes or renews, such as `3,5,10-20`.
    #[arg(long, value_name = "LIST")]
    pub exclude: Option<String>,
    /// A file listing more partitions to exclude (numbers and ranges separated by commas,
    /// spaces or lines; `#` starts a comment). Read again on SIGHUP: partitions newly listed
    /// are handed off, those no longer listed may be taken again. A file that cannot be read
    /// then leaves the list as it was.
    #[arg(long, value_name = "FILE")]
    pub exclude_file: Option<std::path::PathBuf>,
    /// Fault tests only: run the node's lease clock at this rate against real time (1.01 is
    /// one percent fast). Within `1 ± max_clock_drift` the leases stay safe; beyond it they
    /// need not, which is what the fault tests' negative control shows.
    #[arg(long, hide = true, value_name = "RATE")]
    pub clock_rate: Option<f64>,
    /// Fault tests only: start without checking the timings, against each other or against
    /// the group record's, so that a node may take over a lease while its holder still
    /// serves it. The fault tests' negative control.
    #[arg(long = "unsafe-timings", hide = true)]
    pub unsafe_timings: bool,
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

impl Cli {
    /// The store to use: `--store`, or the default file in the current directory. Parsed
    /// here rather than by clap so that a bad URL is reported like every other error.
    pub fn store_url(&self) -> Result<StoreUrl, InvalidStoreUrl> {
        StoreUrl::parse(self.store.as_deref().unwrap_or(DEFAULT_STORE))
    }
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
