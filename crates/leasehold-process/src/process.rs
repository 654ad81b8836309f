//! A participant as a long-lived process, up to the moment it runs: what it is given, and
//! start-up — the store reached (waiting while it is down), the records built out, the
//! participant joined, the router following.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use leasehold::metrics::{Metrics, Registry};
use leasehold::{
    Callbacks, ConfigError, Environment, LeaseStore, Participant, ParticipantConfig, Router,
    TimeoutStore,
};

use crate::partitions::{partition_count, PartitionCount};
use crate::retry::retrying;
use crate::running::{Reload, Running, StopReason};
use crate::shutdown::Shutdown;
use crate::store_url::{self, InvalidStoreUrl, StoreUrl};
use crate::wait::StoreWait;

/// The configuration for a partition count read from the table.
type ConfigFor = Box<dyn Fn(u32) -> ParticipantConfig + Send + Sync>;

/// Where the store comes from.
enum Source {
    /// Opened from a URL, again at each attempt while it cannot be reached (boxed: the
    /// clients' settings are large).
    Url(Box<StoreUrl>),
    /// Opened by the caller.
    Store(Arc<dyn LeaseStore>),
}

/// A participant to run as a process: the store, the configuration, and what runs beside
/// it. Nothing happens until [`Process::start`] (or [`Process::run`]).
///
/// Start-up fails at once on what waiting cannot fix (invalid timings, a group that does not
/// exist, a partition count that does not match it, a group record that refuses the node),
/// and waits, trying again with jittered back-off and logging each try, while the store
/// cannot be reached. A stop asked for meanwhile (SIGTERM or SIGINT, unless
/// [`Process::shutdown_on`] says otherwise) ends the wait with nothing held.
pub struct Process {
    source: Source,
    config: ParticipantConfig,
    partitions: PartitionCount,
    config_for: Option<ConfigFor>,
    callbacks: Option<Arc<dyn Callbacks>>,
    environment: Environment,
    registry: Option<Arc<Registry>>,
    router_poll: Option<Duration>,
    shutdown: Option<Shutdown>,
    reload: Option<Reload>,
    wait: Arc<StoreWait>,
    call_limit: Option<Duration>,
    unchecked: bool,
    restart_in_place: bool,
}

impl Process {
    /// A process for `config` on the store at `url` (any scheme this build reads: see
    /// [`StoreUrl`]), whose group must already hold `config.partitions` records
    /// ([`Process::create_records`] to create them).
    pub fn new(url: &str, config: ParticipantConfig) -> Result<Process, InvalidStoreUrl> {
        Ok(Process::from_url(StoreUrl::parse(url)?, config))
    }

    /// A process on the store `url` names.
    pub fn from_url(url: StoreUrl, config: ParticipantConfig) -> Process {
        Process::with_source(Source::Url(Box::new(url)), config)
    }

    /// A process on a store the caller opened.
    pub fn with_store(store: Arc<dyn LeaseStore>, config: ParticipantConfig) -> Process {
        Process::with_source(Source::Store(store), config)
    }

    fn with_source(source: Source, config: ParticipantConfig) -> Process {
        let partitions = PartitionCount::Exactly(config.partitions);
        Process {
            source,
            config,
            partitions,
            config_for: None,
            callbacks: None,
            environment: Environment::default(),
            registry: None,
            router_poll: None,
            shutdown: None,
            reload: None,
            wait: Arc::default(),
            call_limit: None,
            unchecked: false,
            restart_in_place: false,
        }
    }

    /// Creates the group's missing lease records, up to `config.partitions`, while the group
    /// is unused (see [`PartitionCount::CreateUpTo`]).
    pub fn create_records(mut self) -> Process {
        self.partitions = PartitionCount::CreateUpTo(self.config.partitions);
        self
    }

    /// Takes the partition count from the lease table, and the configuration from
    /// `config_for` given that count: defaults that follow the count (such as
    /// `max_partitions_per_node` and `relist_after`) must see the real one. The configuration
    /// given to [`Process::new`] then serves only the checks made before the store is
    /// reached.
    pub fn partitions_from_table(
        mut self,
        config_for: impl Fn(u32) -> ParticipantConfig + Send + Sync + 'static,
    ) -> Process {
        self.partitions = PartitionCount::FromTable;
        self.config_for = Some(Box::new(config_for));
        self
    }

    /// The participant's callbacks.
    pub fn callbacks(mut self, callbacks: impl Callbacks) -> Process {
        self.callbacks = Some(Arc::new(callbacks));
        self
    }

    /// The participant's clock, seed and session randomness (its metrics come from
    /// [`Process::metrics`]).
    pub fn environment(mut self, environment: Environment) -> Process {
        // Whichever comes first, the metrics asked for stay recorded.
        let metrics = self.environment.metrics.take();
        self.environment = Environment {
            metrics: metrics.or(environment.metrics),
            ..environment
        };
        self
    }

    /// Records the participant's metrics in a registry of its own ([`Process::registry`]),
    /// to serve with [`Process::serve_metrics`] or beside the caller's own endpoints.
    pub fn metrics(self) -> Process {
        self.metrics_in(Registry::default())
    }

    /// Records the participant's metrics in `registry`, beside what the caller registered
    /// there already (its servers' figures, say).
    pub fn metrics_in(mut self, registry: Registry) -> Process {
        self.record_metrics_in(registry);
        self
    }

    fn record_metrics_in(&mut self, mut registry: Registry) -> Arc<Registry> {
        self.environment.metrics = Some(Metrics::register(&mut registry));
        let registry = Arc::new(registry);
        self.registry = Some(Arc::clone(&registry));
        registry
    }

    /// The registry the participant's metrics are recorded in, once [`Process::metrics`]
    /// asked for them; its families are empty until the participant starts.
    pub fn registry(&self) -> Option<&Arc<Registry>> {
        self.registry.as_ref()
    }

    /// Serves `/metrics` and `/healthz` on `address` (`HOST:PORT`, port 0 for any) from now
    /// on, before the store is reached; returns the address bound. Turns
    /// [`Process::metrics`] on.
    pub async fn serve_metrics(&mut self, address: &str) -> anyhow::Result<SocketAddr> {
        let registry = match &self.registry {
            Some(registry) => Arc::clone(registry),
            None => self.record_metrics_in(Registry::default()),
        };
        crate::metrics_http::serve_metrics(address, registry).await
    }

    /// Keeps a [`Router`] following the lease table beside the participant
    /// ([`Running::router`]), re-reading the whole map every `poll_interval`.
    pub fn follow_router(mut self, poll_interval: Duration) -> Process {
        self.router_poll = Some(poll_interval);
        self
    }

    /// Stops when `requested` resolves instead of on SIGTERM or SIGINT.
    pub fn shutdown_on(mut self, requested: impl Future<Output = ()> + Send + 'static) -> Process {
        self.shutdown = Some(Shutdown::on(async move {
            requested.await;
            "shutdown".to_owned()
        }));
        self
    }

    /// Calls `reload` with the running participant on each SIGHUP (a new exclusion list,
    /// say). Without it SIGHUP keeps its default action.
    pub fn on_reload(mut self, reload: impl Fn(&Participant) + Send + Sync + 'static) -> Process {
        self.reload = Some(Box::new(reload));
        self
    }

    /// Makes a requested stop a restart in place ([`Participant::restart`]): the node's
    /// partitions stay reserved for its name for the group's restart window, so that the
    /// process started next under the name gets them back and nothing moves. A process that
    /// is not coming back should stop without it, handing everything off at once.
    pub fn restart_in_place(mut self, restart_in_place: bool) -> Process {
        self.restart_in_place = restart_in_place;
        self
    }

    /// The time limit on each store call made at start-up (opening the store, reading the
    /// group); `config.store_timeout` by default.
    pub fn store_call_limit(mut self, limit: Duration) -> Process {
        self.call_limit = Some(limit);
        self
    }

    /// How the wait for the store is going, for whoever reports on it meanwhile.
    pub fn store_wait(&self) -> Arc<StoreWait> {
        Arc::clone(&self.wait)
    }

    /// Starts without checking the timings, neither here nor against the group record: for
    /// the real-process negative controls only. Two processes may then serve one partition
    /// at once.
    #[cfg(feature = "negative-controls")]
    pub fn unchecked_timings(mut self) -> Process {
        self.unchecked = true;
        self
    }

    /// Checks what needs no store: the configuration's timings and limits, with a stand-in
    /// partition count while the count is to come from the table. [`Process::start`] checks
    /// it first; call it to fail before anything else is set up.
    pub fn check(&self) -> Result<(), ConfigError> {
        let mut config = self.config.clone();
        if self.partitions == PartitionCount::FromTable {
            // Checked against the real count once it is read: a stand-in would refuse
            // exclusions the group may well have.
            config.partitions = config.partitions.max(1);
            config.excluded.clear();
        }
        config.validate()
    }

    /// Starts, runs until a stop is asked for or the lease loop halts, and hands off: the
    /// whole life of a process whose work runs in the callbacks. Returns why it stopped.
    pub async fn run(self) -> anyhow::Result<StopReason> {
        let Some(mut running) = self.start().await? else {
            return Ok(StopReason::Requested(
                "before the store was reached".to_owned(),
            ));
        };
        let reason = running.wait().await;
        running.stop().await;
        Ok(reason)
    }

    /// Reaches the store and starts the participant; `None` if a stop was asked for first.
    /// Returns once the group record has admitted the node (and the router, if asked for,
    /// has read the map); the participant takes its partitions from then on.
    pub async fn start(mut self) -> anyhow::Result<Option<Running>> {
        let node = self.config.node.clone();
        let mut shutdown = match self.shutdown.take() {
            Some(shutdown) => shutdown,
            None => Shutdown::on_signals()?,
        };
        let hangup = match self.reload {
            Some(_) => Some(crate::shutdown::hangup()?),
            None => None,
        };
        if !self.unchecked {
            self.check()
                .with_context(|| format!("invalid configuration for node {node}"))?;
        }
        let limit = self.call_limit.unwrap_or(self.config.store_timeout);
        // SQLite, whose writes block, is told to give up within the participant's own limit,
        // so that none of its writes lands after the participant concluded it had not.
        let open_limit = limit.min(self.config.store_timeout);
        let group = self.config.group.clone();
        let (source, group_ref, expected) = (&self.source, &group, self.partitions);
        let reached = retrying(&mut shutdown, &self.wait, limit, || async move {
            let store = match source {
                Source::Url(url) => store_url::open(url, open_limit).await?,
                Source::Store(store) => Arc::clone(store),
            };
            let bounded: Arc<dyn LeaseStore> =
                Arc::new(TimeoutStore::new(Arc::clone(&store), limit));
            let partitions = partition_count(&*bounded, group_ref, expected).await?;
            anyhow::Ok((store, bounded, partitions))
        })
        .await?;
        let Some((store, bounded, partitions)) = reached else {
            return Ok(None);
        };
        if self.wait.failures() > 0 {
            tracing::info!(%node, failed_attempts = self.wait.failures(), "store reached");
        }
        let config = match &self.config_for {
            Some(config_for) => config_for(partitions),
            None => self.config,
        };
        anyhow::ensure!(
            config.partitions == partitions,
            "node {node}: the configuration is for {} partitions, the group has {partitions}",
            config.partitions
        );
        let callbacks: Arc<dyn Callbacks> = match self.callbacks {
            Some(callbacks) => callbacks,
            None => Arc::new(()),
        };
        tracing::info!(
            %node, group = %config.group, partitions, heartbeat = ?config.heartbeat,
            lease_validity = ?config.lease_validity, acquire_after = ?config.acquire_after,
            "node starting"
        );
        let participant = match self.unchecked {
            #[cfg(feature = "negative-controls")]
            true => start_unchecked(store, config, callbacks, self.environment),
            _ => Participant::start_with(store, config, callbacks, self.environment)
                .with_context(|| format!("invalid configuration for node {node}"))?,
        };
        let mut running = Running::new(participant, bounded, partitions, shutdown, hangup);
        running.reload = self.reload;
        running.restart_in_place = self.restart_in_place;
        let admitted = tokio::select! {
            joined = running.participant.joined() => Some(joined),
            cause = running.shutdown.requested() => {
                tracing::info!(%node, signal = %cause, "stopping before the group admitted the node");
                None
            }
        };
        match admitted {
            Some(joined) => joined.with_context(|| format!("node {node} was not admitted"))?,
            None => {
                running.stop().await;
                return Ok(None);
            }
        }
        if let Some(poll) = self.router_poll {
            let table = Arc::clone(&running.store);
            let following = retrying(&mut running.shutdown, &self.wait, limit, || {
                let (table, group) = (Arc::clone(&table), group.clone());
                async move {
                    Router::follow(table, group, partitions, poll)
                        .await
                        .context("cannot read the lease table for routing")
                }
            })
            .await?;
            match following {
                Some(router) => running.router = Some(router),
                None => {
                    running.stop().await;
                    return Ok(None);
                }
            }
        }
        Ok(Some(running))
    }
}

#[cfg(feature = "negative-controls")]
fn start_unchecked(
    store: Arc<dyn LeaseStore>,
    mut config: ParticipantConfig,
    callbacks: Arc<dyn Callbacks>,
    environment: Environment,
) -> Participant {
    let node = config.node.clone();
    config.negative_controls_mut().skip_group_check = true;
    tracing::warn!(%node, "starting with unchecked timings: two nodes may serve one partition at once");
    Participant::start_unchecked(store, config, callbacks, environment)
}
