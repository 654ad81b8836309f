//! The options of the commands that run a participant: `node`, `agent` and `exec`.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use leasehold::duration::parse_duration;
use leasehold::NodeId;

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
    #[arg(
        long,
        default_value = "127.0.0.1:7464",
        value_name = "ADDR",
        env = "LEASEHOLD_LISTEN"
    )]
    pub listen: String,
    /// A file holding a bearer token that permits, releases and drains must carry.
    #[arg(long, value_name = "FILE", env = "LEASEHOLD_TOKEN_FILE")]
    pub token_file: Option<std::path::PathBuf>,
}

/// Options of `node`.
#[derive(Debug, Clone, Args)]
pub struct NodeArgs {
    /// This node's name, unique in the group.
    #[arg(long, env = "LEASEHOLD_ID")]
    pub id: NodeId,
    /// How many partitions the group has. Default: the group's existing count. If the group
    /// does not exist yet, it is created with this count.
    #[arg(long, env = "LEASEHOLD_PARTITIONS")]
    pub partitions: Option<u32>,
    /// How often held leases are renewed [default: 10s].
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", env = "LEASEHOLD_HEARTBEAT")]
    pub heartbeat: Option<Duration>,
    /// How long a renewal keeps a lease valid [default: 30s].
    #[arg(long, visible_alias = "lease-validity", value_parser = parse_duration, value_name = "DURATION", env = "LEASEHOLD_VALIDITY")]
    pub validity: Option<Duration>,
    /// How long a record must stay unchanged before this node takes it over [default: 45s].
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", env = "LEASEHOLD_ACQUIRE_AFTER")]
    pub acquire_after: Option<Duration>,
    /// How often the whole table is read [default: 10s].
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", env = "LEASEHOLD_SCAN_INTERVAL")]
    pub scan_interval: Option<Duration>,
    /// Time limit on each store call [default: 5s, or the heartbeat if shorter].
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", env = "LEASEHOLD_STORE_TIMEOUT")]
    pub store_timeout: Option<Duration>,
    /// The most partitions this node will hold [default: all].
    #[arg(long, env = "LEASEHOLD_MAX_PARTITIONS_PER_NODE")]
    pub max_partitions_per_node: Option<u32>,
    /// The most leases this node takes in one scan of the table, so that a node joining a
    /// large group takes its share over a few scans instead of in one burst of writes
    /// [default: 16].
    #[arg(long, env = "LEASEHOLD_MAX_ACQUIRES_PER_SCAN")]
    pub max_acquires_per_scan: Option<u32>,
    /// This node's relative capacity [default: 1].
    #[arg(long, env = "LEASEHOLD_WEIGHT")]
    pub weight: Option<u32>,
    /// This node's capacity for load, relative to the others', when the application reports
    /// load [default: its weight].
    #[arg(long, env = "LEASEHOLD_CAPACITY")]
    pub capacity: Option<f64>,
    /// Hand off the hottest partitions others have room for while this node's load is above
    /// this [default: none].
    #[arg(long, env = "LEASEHOLD_MAX_LOAD")]
    pub max_load: Option<f64>,
    /// How far above its fair share of the load a node may go before partitions move
    /// [default: 1.10].
    #[arg(long, env = "LEASEHOLD_LOAD_BAND")]
    pub load_band: Option<f64>,
    /// The fraction of the table the group may move to balance load per --churn-window
    /// [default: 0.10].
    #[arg(long, env = "LEASEHOLD_CHURN_BUDGET")]
    pub churn_budget: Option<f64>,
    /// The window the churn budget counts over [default: 10m].
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", env = "LEASEHOLD_CHURN_WINDOW")]
    pub churn_window: Option<Duration>,
    /// Delete member records unchanged for this long: nodes that crashed and never came
    /// back [default: 1h].
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", env = "LEASEHOLD_FORGET_MEMBERS_AFTER")]
    pub forget_members_after: Option<Duration>,
    /// How long a settled node may go without reading the lease table; 0s reads it every
    /// scan [default: 0s up to 4096 partitions, 5m above].
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", env = "LEASEHOLD_RELIST_AFTER")]
    pub relist_after: Option<Duration>,
    /// How long giving a lease up (rebalancing, a drain, SIGTERM) waits for the work in
    /// flight under it before letting the lease expire instead [default: 30s].
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", env = "LEASEHOLD_DRAIN_TIMEOUT")]
    pub drain_timeout: Option<Duration>,
    /// At SIGTERM or SIGINT, restart in place: once the work in flight has ended, leave this
    /// node's partitions reserved for its name instead of handing them to the others. The
    /// process started next under the same `--id` takes them back at once (under new
    /// epochs); the others take them only if it is not back within the group's restart
    /// window (`leasehold timings --restart-window`, by default its acquire_after). For a
    /// rolling restart of partitions that carry state; a node that is not coming back should
    /// stop without it.
    #[arg(long, env = "LEASEHOLD_RESTART_IN_PLACE")]
    pub restart_in_place: bool,
    /// Append `<unix_ns> <node> <event> <partition> <epoch>` lines here, one per lease
    /// gained or given up: `acquired`, `released` (handed off), `expired` (ran out
    /// unrenewed; the time is the deadline), `conflict` (another write ended it), `changed`
    /// (a listing showed the record changed behind this node's back) or `stopped` (the
    /// lease loop ended).
    #[arg(long, value_name = "FILE", env = "LEASEHOLD_FENCE_LOG")]
    pub fence_log: Option<PathBuf>,
    /// Append `<unix_ns> <node> work <partition> <epoch>` for each partition held, every
    /// --work-interval. With --work-duration, each line starts a unit of work that holds a
    /// work permit for that long and ends with a `done` line, or `abandoned` if the lease
    /// ran out under it.
    #[arg(
        long,
        value_name = "FILE",
        requires = "work_interval",
        env = "LEASEHOLD_WORK_LOG"
    )]
    pub work_log: Option<PathBuf>,
    /// How often to write work lines, or to start a unit on each partition with none running.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", requires = "work_log", env = "LEASEHOLD_WORK_INTERVAL")]
    pub work_interval: Option<Duration>,
    /// How long each unit of work holds its permit; a hand-off of the partition waits for it.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", requires = "work_log", env = "LEASEHOLD_WORK_DURATION")]
    pub work_duration: Option<Duration>,
    /// Serve Prometheus metrics at http://ADDR/metrics, and /healthz, on this address
    /// (HOST:PORT; port 0 picks a free one, printed on standard output).
    #[arg(long, value_name = "ADDR", env = "LEASEHOLD_METRICS_LISTEN")]
    pub metrics_listen: Option<String>,
    /// The URL this node serves clients on, published in its member record: routers return
    /// it with the owner of a key, and `status` shows it.
    #[arg(long, value_name = "URL", env = "LEASEHOLD_ADVERTISE")]
    pub advertise: Option<String>,
    /// A label published with the member record, as KEY=VALUE (repeat for more; up to 16).
    #[arg(long = "meta", value_name = "KEY=VALUE", value_parser = parse_meta, env = "LEASEHOLD_META", value_delimiter = ',')]
    pub meta: Vec<(String, String)>,
    /// Partitions this node never takes or renews, such as `3,5,10-20`.
    #[arg(long, value_name = "LIST", env = "LEASEHOLD_EXCLUDE")]
    pub exclude: Option<String>,
    /// A file listing more partitions to exclude (numbers and ranges separated by commas,
    /// spaces or lines; `#` starts a comment). Read again on SIGHUP: partitions newly listed
    /// are handed off, those no longer listed may be taken again. A file that cannot be read
    /// then leaves the list as it was.
    #[arg(long, value_name = "FILE", env = "LEASEHOLD_EXCLUDE_FILE")]
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

/// Options of `exec`.
#[derive(Debug, Args)]
pub struct ExecArgs {
    /// The node's options, as `node` takes them.
    #[command(flatten)]
    pub node: NodeArgs,
    /// The partitions to hold, such as `0` or `0-3,8` [default: every partition of the
    /// group]. The command runs once for each of them this node holds.
    #[arg(long, env = "LEASEHOLD_HOLD", value_name = "LIST")]
    pub hold: Option<String>,
    /// Start the command again each time a lease it ran under is regained, instead of
    /// exiting once a lease is lost or handed off.
    #[arg(long, env = "LEASEHOLD_RESTART")]
    pub restart: bool,
    /// How long the command has between SIGTERM and SIGKILL when it must stop. It is also
    /// stopped once this little validity is left on an unrenewed lease, so it must be shorter
    /// than the lease validity less the heartbeat [default: 10s, or half of validity less
    /// heartbeat if that is shorter].
    #[arg(long, env = "LEASEHOLD_GRACE", value_parser = parse_duration, value_name = "DURATION")]
    pub grace: Option<Duration>,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}
