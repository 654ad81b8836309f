//! Partition queues on RabbitMQ, each consumed by whichever consumer holds its partition's
//! leasehold lease, with the events applied to PostgreSQL under the lease's epoch.
//!
//! Subcommands: `producer` publishes the events, `consumer` runs one consumer, `check`
//! verifies what the consumers applied, `drain` asks a consumer to hand its partitions off,
//! `teardown` deletes an experiment's queues and tables.

mod consumer;
mod event;
mod ledger;
mod producer;

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use lapin::options::QueueDeleteOptions;
use lapin::{Connection, ConnectionProperties};
use leasehold::{GroupName, NodeId};
use leasehold_process::store_url;

use crate::event::Layout;

/// How long to wait for the broker.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The limit on each call to the lease store from a one-off command.
const STORE_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Parser)]
#[command(
    name = "partitioned-queue",
    about = "Partition queues consumed under leasehold leases"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Where the queues are and how many.
#[derive(Args, Clone)]
struct QueueArgs {
    /// The broker, e.g. amqp://guest:guest@127.0.0.1:5672/%2f.
    #[arg(long, env = "LEASEHOLD_TEST_AMQP_URL")]
    amqp: String,
    /// How many partitions, one queue each.
    #[arg(long)]
    partitions: u32,
    /// Queue names are PREFIX-PARTITION.
    #[arg(long, default_value = "orders")]
    queue_prefix: String,
}

/// Where the events are applied.
#[derive(Args, Clone)]
struct LedgerArgs {
    /// The database the events are applied to.
    #[arg(long, env = "LEASEHOLD_TEST_POSTGRES_URL")]
    pg: String,
    /// The schema of the example's tables (created if missing).
    #[arg(long, default_value = "partitioned_queue")]
    schema: String,
}

/// How many events.
#[derive(Args, Clone)]
struct PlanArgs {
    /// Orders 0..N.
    #[arg(long)]
    orders: u32,
    /// Events 1..=K of each order.
    #[arg(long)]
    events_per_order: u32,
}

#[derive(Subcommand)]
enum Command {
    /// Publishes every order's events, in sequence, to the queue of its partition.
    Producer {
        #[command(flatten)]
        queues: QueueArgs,
        #[command(flatten)]
        plan: PlanArgs,
    },
    /// Runs one consumer until SIGTERM or SIGINT, then hands its partitions off.
    Consumer {
        /// This consumer's node name.
        #[arg(long)]
        id: String,
        #[command(flatten)]
        queues: QueueArgs,
        #[command(flatten)]
        ledger: LedgerArgs,
        /// The lease store: sqlite:PATH or postgres://….
        #[arg(long)]
        store: String,
        /// The leasehold group.
        #[arg(long, default_value = "partitioned-queue")]
        group: String,
        /// Short leasehold timings (1 s leases, 1.5 s takeover), for tests and demos.
        #[arg(long)]
        fast: bool,
        /// Unacknowledged messages the broker may send ahead, per partition.
        #[arg(long, default_value_t = 8)]
        prefetch: u16,
        /// Negative control only: apply events out of sequence and more than once.
        #[arg(long, hide = true)]
        unsafe_skip_sequence_check: bool,
        /// Negative control only: apply events under a superseded epoch.
        #[arg(long, hide = true)]
        unsafe_skip_epoch_check: bool,
    },
    /// Verifies every event was applied exactly once, in sequence; exits 1 if not.
    Check {
        #[command(flatten)]
        ledger: LedgerArgs,
        #[command(flatten)]
        plan: PlanArgs,
    },
    /// Asks a consumer to hand all its partitions off (or, with --undo, to take some again).
    Drain {
        /// The lease store: sqlite:PATH or postgres://….
        #[arg(long)]
        store: String,
        /// The leasehold group.
        #[arg(long, default_value = "partitioned-queue")]
        group: String,
        /// The consumer's node name.
        #[arg(long)]
        id: String,
        /// Clears the drain flag instead.
        #[arg(long)]
        undo: bool,
    },
    /// Deletes the queues and the schema of an experiment.
    Teardown {
        #[command(flatten)]
        queues: QueueArgs,
        #[command(flatten)]
        ledger: LedgerArgs,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli.command)) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::FAILURE
        }
    }
}

async fn connect(url: &str) -> anyhow::Result<Connection> {
    tokio::time::timeout(
        CONNECT_TIMEOUT,
        Connection::connect(url, ConnectionProperties::default()),
    )
    .await
    .context("the broker did not answer in time")?
    .context("cannot connect to the broker")
}

async fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Producer { queues, plan } => {
            let layout = Layout::new(&queues.queue_prefix, queues.partitions)?;
            let connection = connect(&queues.amqp).await?;
            let plan = producer::Plan {
                layout,
                orders: plan.orders,
                events_per_order: plan.events_per_order,
            };
            let published = producer::publish(&connection, &plan).await?;
            println!("published {published}");
            let _ = connection.close(200, "done".into()).await;
        }
        Command::Consumer {
            id,
            queues,
            ledger,
            store,
            group,
            fast,
            prefetch,
            unsafe_skip_sequence_check,
            unsafe_skip_epoch_check,
        } => {
            if prefetch == 0 {
                anyhow::bail!("--prefetch must be at least 1 (0 would mean unlimited)");
            }
            let options = consumer::Options {
                id: NodeId::new(&id).context("--id")?,
                amqp_url: queues.amqp,
                pg_url: ledger.pg,
                schema: ledger.schema,
                store_url: store,
                group: GroupName::new(&group).context("--group")?,
                layout: Layout::new(&queues.queue_prefix, queues.partitions)?,
                fast,
                prefetch,
                unsafe_skip_sequence_check,
                unsafe_skip_epoch_check,
            };
            consumer::run(options).await?;
        }
        Command::Check { ledger, plan } => {
            let connection = ledger::Ledger::connect(&ledger.pg, &ledger.schema).await?;
            let report = connection.check(plan.orders, plan.events_per_order).await?;
            println!("{report}");
            if !report.complete_and_exact() {
                return Ok(ExitCode::FAILURE);
            }
        }
        Command::Drain {
            store,
            group,
            id,
            undo,
        } => {
            let store = store_url::open_url(&store, STORE_TIMEOUT).await?;
            let group = GroupName::new(&group).context("--group")?;
            let node = NodeId::new(&id).context("--id")?;
            leasehold::admin::set_draining(&*store, &group, &node, !undo).await?;
            println!("{} {node}", if undo { "undrained" } else { "draining" });
        }
        Command::Teardown { queues, ledger } => {
            let layout = Layout::new(&queues.queue_prefix, queues.partitions)?;
            let connection = connect(&queues.amqp).await?;
            let channel = connection.create_channel().await?;
            for partition in 0..layout.partitions() {
                let queue = layout.queue(leasehold::PartitionId(partition));
                channel
                    .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
                    .await?;
            }
            let _ = connection.close(200, "done".into()).await;
            let database = ledger::Ledger::connect(&ledger.pg, &ledger.schema).await?;
            database.drop_schema(&ledger.schema).await?;
            println!(
                "deleted {} queues and schema {}",
                layout.partitions(),
                ledger.schema
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
