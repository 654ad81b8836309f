//! The `bucket-kv` binary: a server, a load generator and a scenario runner.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use bucket_kv::bench::{self, BenchConfig, Scenario};
use bucket_kv::client::{Client, RetryPolicy};
use bucket_kv::load::{self, LoadConfig};
use bucket_kv::server::{self, ServerConfig};
use clap::{Parser, Subcommand};
use leasehold::duration::parse_duration;
use leasehold::ROUTER_STORE_TIMEOUT;
use leasehold::{LeaseStore, NodeId};
use leasehold_process::store_url;

/// A key-value service over a bucket map, one leasehold partition per bucket.
#[derive(Parser)]
#[command(name = "bucket-kv", version, after_help = leasehold::duration::help())]
struct Cli {
    #[command(subcommand)]
    command: Commands,
}

#[derive(Subcommand)]
enum Commands {
    /// Serve the buckets this server holds leases on.
    Server {
        /// The server's name in the group.
        #[arg(long)]
        id: String,
        /// Where to listen.
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: SocketAddr,
        /// The URL clients reach this server at (default: http://LISTEN).
        #[arg(long)]
        advertise: Option<String>,
        /// The lease store's URL (sqlite:PATH here; any store leasehold reads).
        #[arg(long, default_value = "sqlite:bucket-kv-leases.db")]
        store: String,
        /// The data file, shared by every server of the host.
        #[arg(long, default_value = "bucket-kv-data.db")]
        data: PathBuf,
        /// How many buckets the key space has.
        #[arg(long, default_value_t = 1024)]
        buckets: u32,
        /// Short lease timings (renew every 250 ms, take over after 1.5 s): tests and demos.
        #[arg(long)]
        fast: bool,
        /// The most buckets taken in one scan (default: all of them, so that a hand-off
        /// completes in one scan).
        #[arg(long)]
        max_acquires_per_scan: Option<u32>,
    },
    /// Run client tasks at a fixed rate against running servers and report what they saw.
    Load {
        /// Server URLs to ask when the map names no owner, comma-separated.
        #[arg(long, value_delimiter = ',')]
        servers: Vec<String>,
        /// Client tasks.
        #[arg(long, default_value_t = 16)]
        clients: usize,
        /// Requests per second, all tasks together.
        #[arg(long, default_value_t = 400.0)]
        rate: f64,
        /// How long to run, e.g. 10s, 500ms, 2m.
        #[arg(long, default_value = "10s", value_parser = parse_duration)]
        duration: Duration,
        /// The lease store's URL (sqlite:PATH here; any store leasehold reads).
        #[arg(long, default_value = "sqlite:bucket-kv-leases.db")]
        store: String,
        /// How many buckets the key space has.
        #[arg(long, default_value_t = 1024)]
        buckets: u32,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Start servers on loopback and run the load through a scenario.
    Bench {
        /// Servers at the start.
        #[arg(long, default_value_t = 3)]
        servers: usize,
        /// How many buckets the key space has.
        #[arg(long, default_value_t = 1024)]
        buckets: u32,
        /// What to do to the fleet under load.
        #[arg(long, value_enum, default_value_t = Scenario::Rolling)]
        scenario: Scenario,
        /// Client tasks.
        #[arg(long, default_value_t = 16)]
        clients: usize,
        /// Requests per second, all tasks together.
        #[arg(long, default_value_t = 400.0)]
        rate: f64,
        /// Load before, between and after the scenario's steps.
        #[arg(long, default_value = "2s", value_parser = parse_duration)]
        settle: Duration,
        /// How long a crashed server stays down.
        #[arg(long, default_value = "3s", value_parser = parse_duration)]
        down_for: Duration,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().command {
        Commands::Server {
            id,
            listen,
            advertise,
            store,
            data,
            buckets,
            fast,
            max_acquires_per_scan,
        } => {
            let config = ServerConfig {
                id: NodeId::new(&id).context("server id")?,
                listen,
                advertise,
                store_url: store,
                data_path: data,
                buckets,
                fast,
                data_timeout: Duration::from_secs(2),
                max_acquires_per_scan,
            };
            server::run(config).await
        }
        Commands::Load {
            servers,
            clients,
            rate,
            duration,
            store,
            buckets,
            json,
        } => {
            let store: Arc<dyn LeaseStore> =
                store_url::open_url(&store, ROUTER_STORE_TIMEOUT).await?;
            let client = Client::connect(store, buckets, servers, RetryPolicy::default()).await?;
            let config = LoadConfig {
                clients,
                rate,
                keys_per_client: 64,
                // Runs against one data file each start from keys of their own.
                key_prefix: format!("run{}-", std::process::id()),
            };
            let (stop, stopped) = tokio::sync::watch::channel(false);
            let origin = tokio::time::Instant::now();
            let timer = tokio::spawn(async move {
                tokio::time::sleep(duration).await;
                let _ = stop.send(true);
            });
            let report = load::run(&client, &config, origin, stopped).await;
            timer.abort();
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{report}");
            }
            Ok(())
        }
        Commands::Bench {
            servers,
            buckets,
            scenario,
            clients,
            rate,
            settle,
            down_for,
            json,
        } => {
            let config = BenchConfig {
                exe: std::env::current_exe().context("finding this program")?,
                servers,
                buckets,
                scenario,
                clients,
                rate,
                settle,
                down_for,
                retry: RetryPolicy::default(),
            };
            let report = bench::run(&config).await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!("{report}");
            }
            Ok(())
        }
    }
}
