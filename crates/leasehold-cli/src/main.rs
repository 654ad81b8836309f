//! `leasehold`: operator commands on a lease table, a long-running node, a demo and the
//! simulation.
//!
//! ```text
//! leasehold init --partitions 64            # create the table in ./leasehold.db
//! leasehold node --id server-1              # take part until SIGTERM
//! leasehold status --by-node                # who holds what
//! leasehold stale --watch 15s --min-nodes 3 # probe for cron or alerting; exit 1 on problems
//! leasehold monitor --listen 127.0.0.1:9464  # live map in a browser, /metrics for Prometheus
//! leasehold agent --id server-1               # a node with an HTTP API for a worker in any language
//! leasehold demo                            # crash and drain a fleet in one process
//! leasehold --group b bench --runs 5        # measure hand-offs and failover on this store
//! leasehold sim --seeds 1000                # simulate a fleet under faults; exit 1 on a violation
//! ```
//!
//! Every error is one line on stderr, `leasehold: error: ...`, with its causes joined by
//! `": "`, and exit code 2. `stale` exits 1 or 2 when it finds problems (a warning, or damage
//! to repair) and 3 when it cannot check; `exec` exits with its command's status; `demo` exits 1 when a
//! check fails; `sim` exits 1 when an invariant is broken.

// The doc comments of the command-line definitions are its --help texts, where brackets
// write usage (`etcd://HOST:PORT[,HOST:PORT]`), not links.
#![allow(rustdoc::broken_intra_doc_links)]

mod admin_commands;
mod agent;
mod announce;
mod append_log;
mod bench;
mod cli;
mod cross_site;
mod demo;
mod exclusions;
mod exec;
mod fleet;
mod group_commands;
mod group_table;
mod http;
mod manual;
mod monitor;
mod node;
mod node_process;
mod output;
mod reply;
mod sim;
mod stale;
mod status;
mod stream_slots;
mod table;
mod version;
mod work;

use std::io::IsTerminal;
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use tracing_subscriber::EnvFilter;

use crate::cli::{Cli, Command, LogFormat};

/// How a command that ran to the end came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Done; nothing to report.
    Success,
    /// The command worked and found something wrong (stale leases, a failed demo check, a
    /// broken invariant in the simulation).
    ProblemsFound,
    /// The command ran another program and ends with its exit code (`exec`).
    Exit(u8),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match &cli.command {
        // The simulator drives its own single-threaded runtimes in virtual time: its nodes
        // log only when asked (`RUST_LOG`, to follow one seed's replay), without wall-clock
        // stamps, which would mean nothing there.
        Command::Sim(args) => {
            if std::env::var_os("RUST_LOG").is_some() {
                tracing_subscriber::fmt()
                    .with_env_filter(EnvFilter::from_default_env())
                    .without_time()
                    .with_writer(std::io::stderr)
                    .init();
            }
            return exit_code(sim::run(args));
        }
        Command::Completions { shell } => return exit_code(manual::completions(*shell)),
        Command::ManPages { directory } => return exit_code(manual::man_pages(directory)),
        Command::ExecWatchdog(args) => return exit_code(exec::watchdog::run(args)),
        Command::ExecGuarded(args) => return exit_code(exec::watchdog::guarded(args)),
        _ => {}
    }
    init_logging(&cli.command, cli.log_format);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => return exit_code(Err(anyhow::anyhow!("cannot start the runtime: {error}"))),
    };
    exit_code(runtime.block_on(run(&cli)))
}

async fn run(cli: &Cli) -> anyhow::Result<Outcome> {
    match &cli.command {
        Command::Status(args) => status::run(cli, args).await,
        Command::Timings(args) => group_commands::run(cli, args).await,
        Command::Stale(args) => stale::run(cli, args).await,
        Command::Node(args) => node::run(cli, args).await,
        Command::Demo(args) => demo::run(cli, args).await,
        Command::Bench(args) => bench::run(cli, args).await,
        Command::Fleet(args) => fleet::run(cli, args).await,
        Command::Monitor(args) => monitor::run(cli, args).await,
        Command::Agent(args) => agent::run(cli, args).await,
        Command::Exec(args) => exec::run(cli, args).await,
        other => admin_commands::run(cli, other).await,
    }
}

/// Prints one line of a command's result (see [`write_out`]).
fn say(line: &str) -> anyhow::Result<()> {
    write_out(&format!("{line}\n"))
}

/// Prints a command's result. A reader that stopped reading (`leasehold status | head`)
/// is not an error; the command still ends with its own exit code.
fn write_out(text: &str) -> anyhow::Result<()> {
    output::print(text).context("cannot write to standard output")
}

/// The one place where results become exit codes.
fn exit_code(result: anyhow::Result<Outcome>) -> ExitCode {
    match result {
        Ok(Outcome::Success) => ExitCode::SUCCESS,
        Ok(Outcome::ProblemsFound) => ExitCode::from(1),
        Ok(Outcome::Exit(code)) => ExitCode::from(code),
        Err(error) => {
            eprintln!("leasehold: error: {error:#}");
            ExitCode::from(2)
        }
    }
}

/// Logs go to stderr, filtered by `RUST_LOG` when set. `node` logs at info (each lease it
/// gains or loses); operator commands only warn, so their output stays clean for scripts,
/// and so does the demo, which narrates on stdout and draws each lease change on its map.
fn init_logging(command: &Command, format: LogFormat) {
    let default = match command {
        Command::Node(_) | Command::Agent(_) | Command::Exec(_) => "info",
        _ => "warn",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let logs = tracing_subscriber::fmt().with_env_filter(filter);
    let demo = matches!(command, Command::Demo(_));
    match format {
        LogFormat::Json if demo => logs.json().with_writer(demo::LogWriter::new).init(),
        LogFormat::Json => logs.json().with_writer(std::io::stderr).init(),
        LogFormat::Text => {
            let logs = logs.with_ansi(output::colour(std::io::stderr().is_terminal()));
            if demo {
                logs.with_writer(demo::LogWriter::new).init()
            } else {
                logs.with_writer(std::io::stderr).init()
            }
        }
    }
}
