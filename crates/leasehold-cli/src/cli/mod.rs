//! The command line, as clap derive types.

use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

mod node;
mod tools;

use leasehold::{GroupName, NodeId};
pub use node::{AgentArgs, ExecArgs, NodeArgs};
pub use tools::{BenchArgs, Change, DemoArgs, FleetArgs, MonitorArgs, SimArgs};

use leasehold::duration::{self, parse_duration};
use leasehold_process::store_url::{InvalidStoreUrl, StoreUrl, DEFAULT_STORE};

/// Lease-based partitioning: divide N partitions among servers so that no partition is ever
/// served by two at once.
///
/// Exit codes: 0 success, 1 problems found (stale: a warning), a demo check failed or a
/// simulated invariant was broken, 2 error (stale: damage found), 3 stale could not check;
/// exec exits with its command's status.
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
    #[arg(long, global = true, env = "LEASEHOLD_TIMEOUT", default_value = "5s", value_parser = parse_duration, value_name = "DURATION")]
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
        /// Print the result as one JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Show how the group renews its leases, or change it: per-partition or session.
    /// Refused while member records are present: stop every node first.
    LeaseMode {
        /// The new mode; without it, the current one is shown.
        mode: Option<leasehold::LeaseMode>,
        /// Print the result as one JSON document instead of text.
        #[arg(long)]
        json: bool,
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
        /// Print the result as one JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Show the group record (record format, the timings every node must fit, epoch floor),
    /// or change its timings with --lease-validity and --acquire-after. A change is made
    /// only if every member's timings fit the new ones.
    #[command(after_help = duration::help())]
    Timings(TimingsArgs),
    /// Show the lease table: owner, epoch, state, prohibited nodes, note, version, age.
    Status(StatusArgs),
    /// Sample the table twice and report problems: unrenewed leases, unowned, missing or
    /// corrupt partitions, too few live nodes. Exit codes as a Nagios plugin's: 0 OK, 1 WARNING
    /// (unrenewed or unowned leases, too few nodes), 2 CRITICAL (missing or unreadable records,
    /// epochs gone back), 3 UNKNOWN (could not check).
    #[command(after_help = duration::help())]
    Stale(StaleArgs),
    /// Make the holder of a partition drop it; another node takes it after acquire_after.
    Kick {
        /// The partition.
        partition: u32,
        /// Print the result as one JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Keep a node off a partition (its holder drops it if that is the node).
    Prohibit {
        /// The partition.
        partition: u32,
        /// The node to keep off.
        node: NodeId,
        /// Print the result as one JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Let a node take a partition again.
    Allow {
        /// The partition.
        partition: u32,
        /// The node to allow.
        node: NodeId,
        /// Print the result as one JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Take a partition out of service: nobody holds it until `online`.
    Offline {
        /// The partition.
        partition: u32,
        /// Print the result as one JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Put an offline partition back in service.
    Online {
        /// The partition.
        partition: u32,
        /// Print the result as one JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Ask a node to hand all its partitions off (cooperatively, no expiry).
    Drain {
        /// The node.
        node: NodeId,
        /// Print the result as one JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Let a drained node take partitions again.
    Undrain {
        /// The node.
        node: NodeId,
        /// Print the result as one JSON document instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Run one participant until SIGTERM or SIGINT, then release its leases and exit.
    #[command(after_help = duration::help())]
    Node(Box<NodeArgs>),
    /// Run one participant, as `node` does, with an HTTP/JSON API for a worker in any
    /// language on this host: leases, work permits, release, drain, routing and lease events.
    #[command(after_help = duration::help())]
    Agent(Box<AgentArgs>),
    /// Run a command while this node holds a partition: once for each partition it holds
    /// (`--partitions 1` makes a leader election), with the partition and its fencing token
    /// in LEASEHOLD_PARTITION and LEASEHOLD_EPOCH. The command is stopped (SIGTERM, then
    /// SIGKILL after --grace) when its lease is handed off or lost, and killed by a separate
    /// watchdog process at the lease's deadline even if this one is paused. Exits with the
    /// command's status when it ends by itself, 75 when a lease ends without --restart, 0
    /// after SIGTERM or SIGINT.
    #[command(after_help = duration::help())]
    Exec(Box<ExecArgs>),
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
    /// Run many participants in this one process against the store, in real time, and
    /// report what the fleet cost the store and itself: calls and records per second while
    /// it starts and once settled, write latency, scans and table readings per node, leases
    /// lost, CPU and memory (of the store's server too, when it runs here). It builds and
    /// deletes its own group (--group), and refuses one that has records. Exit 0 when no lease
    /// was lost and every partition was owned, 1 otherwise.
    #[command(after_help = duration::help())]
    Fleet(Box<FleetArgs>),
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
    /// The watchdog `exec` runs each command under: kills it at the lease deadline it is
    /// sent, even while `exec` itself is paused.
    #[command(name = "exec-watchdog", hide = true)]
    ExecWatchdog(WatchdogArgs),
    /// Starts the command of `exec` in its own process group, bound to the life of the
    /// watchdog that started it.
    #[command(name = "exec-guarded", hide = true)]
    ExecGuarded(GuardedArgs),
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

/// A restart window given on the command line: a duration, or the group's default.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Window {
    /// The group's `acquire_after`.
    Default,
    /// This long.
    Set(Duration),
}

fn parse_window(text: &str) -> Result<Window, String> {
    match text {
        "default" => Ok(Window::Default),
        _ => parse_duration(text)
            .map(Window::Set)
            .map_err(|error| error.to_string()),
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
    /// How long the others leave the partitions of a node restarting in place (`node
    /// --restart-in-place`) reserved for it, from when they see them; `default` for the
    /// group's acquire_after. At most four times acquire_after. Nodes read it when they join.
    #[arg(long, value_name = "DURATION|default", value_parser = parse_window)]
    pub restart_window: Option<Window>,
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

impl Cli {
    /// The store to use: `--store`, or the default file in the current directory. Parsed
    /// here rather than by clap so that a bad URL is reported like every other error.
    pub fn store_url(&self) -> Result<StoreUrl, InvalidStoreUrl> {
        StoreUrl::parse(self.store.as_deref().unwrap_or(DEFAULT_STORE))
    }
}

/// Options of the hidden `exec-watchdog`.
#[derive(Debug, Args)]
pub struct WatchdogArgs {
    /// The lease's deadline, in nanoseconds of CLOCK_MONOTONIC.
    #[arg(long)]
    pub until_ns: u64,
    /// Time between SIGTERM and SIGKILL, in nanoseconds.
    #[arg(long)]
    pub grace_ns: u64,
    /// The command.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

/// Options of the hidden `exec-guarded`.
#[derive(Debug, Args)]
pub struct GuardedArgs {
    /// The watchdog's process id: the command is not started if it has already gone.
    #[arg(long)]
    pub parent: u32,
    /// The command.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}
