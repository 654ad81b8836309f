//! The consumer: a leasehold participant that consumes a partition's queue only while it
//! holds the partition, one work permit per message, and applies each event to PostgreSQL
//! under the permit's epoch.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use futures_util::StreamExt;
use lapin::options::{
    BasicAckOptions, BasicCancelOptions, BasicConsumeOptions, BasicNackOptions, BasicQosOptions,
    BasicRejectOptions, QueueDeclareOptions,
};
use lapin::types::FieldTable;
use lapin::{Channel, Connection, ConnectionProperties};
use leasehold::{
    Callbacks, GroupName, LeaseGuard, Loss, NodeId, Participant, ParticipantConfig, PartitionId,
};
use leasehold_process::Process;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::event::{Event, Layout};
use crate::ledger::{Ledger, Outcome};

/// The AMQP heartbeat asked for, in seconds (the unit of the protocol's URI parameter): a
/// stopped or cut-off consumer's connection is closed by the broker after about two missed
/// heartbeats, which puts its unacknowledged messages back on the queue.
const HEARTBEAT_SECONDS: u16 = 3;

/// How often a worker checks its lease when no message arrives, besides being woken by
/// the participant's callbacks.
const LEASE_CHECK_INTERVAL: Duration = Duration::from_millis(200);

/// How often the consumer starts workers for partitions it has newly taken.
const RECONCILE_INTERVAL: Duration = Duration::from_millis(100);

/// How long to wait before putting back an event whose predecessor has not been applied:
/// the predecessor is held unacknowledged by a previous owner whose channel the broker has
/// not closed yet, and retrying at once would only spin.
const GAP_RETRY_DELAY: Duration = Duration::from_millis(50);

/// How long a worker that failed waits before the partition gets a new worker.
const WORKER_RESTART_DELAY: Duration = Duration::from_millis(500);

/// Bound on every AMQP or PostgreSQL call that has no deadline of its own.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// How long shutdown waits for workers to finish the message in hand.
const WORKER_STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// What a consumer is told on its command line.
#[derive(Debug, Clone)]
pub struct Options {
    /// The node name.
    pub id: NodeId,
    /// The broker.
    pub amqp_url: String,
    /// The database the events are applied to.
    pub pg_url: String,
    /// The schema of the example's tables.
    pub schema: String,
    /// The lease store.
    pub store_url: String,
    /// The leasehold group.
    pub group: GroupName,
    /// The queues.
    pub layout: Layout,
    /// Short leasehold timings ([`ParticipantConfig::fast`]).
    pub fast: bool,
    /// Unacknowledged messages the broker may send ahead, per partition.
    pub prefetch: u16,
    /// Negative control: apply events out of sequence and more than once.
    pub unsafe_skip_sequence_check: bool,
    /// Negative control: apply events under a superseded epoch.
    pub unsafe_skip_epoch_check: bool,
}

/// Wakes a partition's worker when the participant stops new work on it.
#[derive(Default)]
struct Hooks {
    wakers: Mutex<HashMap<PartitionId, Arc<Notify>>>,
    acquired: Notify,
}

impl Hooks {
    fn waker(&self, partition: PartitionId) -> Arc<Notify> {
        let mut wakers = self.wakers.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(wakers.entry(partition).or_default())
    }

    fn wake(&self, partition: PartitionId) {
        // notify_one stores a permit, so a worker between two checks still sees it.
        self.waker(partition).notify_one();
    }
}

/// Shares the hooks with the participant, which needs an owned `Callbacks`.
struct SharedHooks(Arc<Hooks>);

impl Callbacks for SharedHooks {
    fn on_acquired(&self, lease: &LeaseGuard) {
        tracing::info!(
            partition = lease.partition().0,
            epoch = lease.epoch().0,
            "acquired"
        );
        self.0.acquired.notify_one();
    }

    fn on_handing_off(&self, lease: &LeaseGuard) {
        tracing::info!(partition = lease.partition().0, "handing off");
        self.0.wake(lease.partition());
    }

    fn on_lost(&self, loss: &Loss) {
        tracing::info!(partition = loss.partition.0, reason = ?loss.reason, "lost");
        self.0.wake(loss.partition);
    }
}

/// One AMQP connection for the whole consumer, opened again when the broker has closed it
/// (after a pause longer than the heartbeat timeout, say).
struct AmqpLink {
    url: String,
    connection: tokio::sync::Mutex<Option<Connection>>,
}

impl AmqpLink {
    fn new(url: &str) -> AmqpLink {
        let url = if url.contains("heartbeat=") {
            url.to_owned()
        } else {
            let separator = if url.contains('?') { '&' } else { '?' };
            format!("{url}{separator}heartbeat={HEARTBEAT_SECONDS}")
        };
        AmqpLink {
            url,
            connection: tokio::sync::Mutex::new(None),
        }
    }

    async fn channel(&self) -> anyhow::Result<Channel> {
        let mut connection = self.connection.lock().await;
        if let Some(open) = connection.as_ref().filter(|c| c.status().connected()) {
            match tokio::time::timeout(CALL_TIMEOUT, open.create_channel()).await {
                Ok(Ok(channel)) => return Ok(channel),
                Ok(Err(error)) => tracing::warn!(%error, "cannot open a channel; reconnecting"),
                Err(_) => tracing::warn!("opening a channel timed out; reconnecting"),
            }
        }
        let fresh = tokio::time::timeout(
            CALL_TIMEOUT,
            Connection::connect(&self.url, ConnectionProperties::default()),
        )
        .await
        .context("the broker did not answer in time")?
        .context("cannot connect to the broker")?;
        let channel = tokio::time::timeout(CALL_TIMEOUT, fresh.create_channel())
            .await
            .context("opening a channel timed out")??;
        *connection = Some(fresh);
        Ok(channel)
    }

    async fn close(&self) {
        if let Some(connection) = self.connection.lock().await.take() {
            let _ = tokio::time::timeout(CALL_TIMEOUT, connection.close(200, "bye".into())).await;
        }
    }
}

/// Everything a worker needs.
struct State {
    options: Options,
    participant: Participant,
    hooks: Arc<Hooks>,
    amqp: AmqpLink,
}

/// Runs a consumer until SIGTERM or SIGINT, then hands every partition off and returns.
/// While the lease store cannot be reached it waits for it, trying again with back-off.
/// Returns an error if the participant stops by itself.
pub async fn run(options: Options) -> anyhow::Result<()> {
    let partitions = options.layout.partitions();
    let config = if options.fast {
        ParticipantConfig::fast(options.id.clone(), partitions)
    } else {
        ParticipantConfig::new(options.id.clone(), partitions)
    }
    .with_group(options.group.clone());
    let hooks = Arc::new(Hooks::default());
    // Every consumer may build out the records: nodes started together on a new table each
    // finish what the others have not.
    let process = Process::new(&options.store_url, config)?
        .create_records()
        .callbacks(SharedHooks(Arc::clone(&hooks)));
    let Some(mut running) = process.start().await? else {
        return Ok(());
    };
    let participant = running.participant().clone();
    let context = Arc::new(State {
        amqp: AmqpLink::new(&options.amqp_url),
        options,
        participant: participant.clone(),
        hooks,
    });
    // One worker per partition at a time: a new tenure's worker starts once the last one has
    // ended, which every call it makes bounds in time.
    let mut workers: HashMap<PartitionId, JoinHandle<()>> = HashMap::new();
    let mut tick = tokio::time::interval(RECONCILE_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let reason = loop {
        tokio::select! {
            reason = running.wait() => break reason,
            () = context.hooks.acquired.notified() => {}
            _ = tick.tick() => {}
        }
        workers.retain(|_, worker| !worker.is_finished());
        for lease in participant.leases() {
            let partition = lease.partition();
            workers
                .entry(partition)
                .or_insert_with(|| tokio::spawn(worker(Arc::clone(&context), partition)));
        }
    };
    tracing::info!("shutting down");
    // Hand-offs wait for the permits in flight; the workers see their leases go and stop.
    running.stop().await;
    for (_, worker) in workers.drain() {
        if tokio::time::timeout(WORKER_STOP_TIMEOUT, worker)
            .await
            .is_err()
        {
            tracing::warn!("a worker did not stop in time");
        }
    }
    context.amqp.close().await;
    reason.into_result()
}

/// Consumes `partition`'s queue for as long as this node holds it; on an error, waits a
/// little so the next worker does not spin.
async fn worker(context: Arc<State>, partition: PartitionId) {
    if let Err(error) = consume(&context, partition).await {
        tracing::warn!(
            partition = partition.0,
            error = format!("{error:#}"),
            "worker failed"
        );
        tokio::time::sleep(WORKER_RESTART_DELAY).await;
    }
}

/// Whether to go on consuming after a message.
enum Next {
    Continue,
    Stop,
}

async fn consume(context: &State, partition: PartitionId) -> anyhow::Result<()> {
    let Some(lease) = context.participant.lease(partition) else {
        return Ok(());
    };
    let options = &context.options;
    let mut ledger = Ledger::connect(&options.pg_url, &options.schema).await?;
    ledger.unsafe_disable_checks(
        options.unsafe_skip_sequence_check,
        options.unsafe_skip_epoch_check,
    );
    let queue = options.layout.queue(partition);
    let channel = context.amqp.channel().await?;
    let result = consume_on(context, partition, &lease, &mut ledger, &channel, &queue).await;
    // Closing the channel puts back every message sent ahead and not acknowledged, for the
    // next owner.
    let _ = tokio::time::timeout(CALL_TIMEOUT, channel.close(200, "hand-off".into())).await;
    tracing::info!(
        partition = partition.0,
        epoch = lease.epoch().0,
        "stopped consuming"
    );
    result
}

async fn consume_on(
    context: &State,
    partition: PartitionId,
    lease: &LeaseGuard,
    ledger: &mut Ledger,
    channel: &Channel,
    queue: &str,
) -> anyhow::Result<()> {
    let call = |what: &'static str| move |_| anyhow::anyhow!("{what} timed out");
    tokio::time::timeout(
        CALL_TIMEOUT,
        channel.basic_qos(context.options.prefetch, BasicQosOptions::default()),
    )
    .await
    .map_err(call("basic.qos"))??;
    tokio::time::timeout(
        CALL_TIMEOUT,
        channel.queue_declare(
            queue.into(),
            QueueDeclareOptions {
                durable: true,
                ..QueueDeclareOptions::default()
            },
            FieldTable::default(),
        ),
    )
    .await
    .map_err(call("queue.declare"))??;
    let tag = format!("{}-{}-{}", context.options.id, partition.0, lease.epoch().0);
    let mut deliveries = tokio::time::timeout(
        CALL_TIMEOUT,
        channel.basic_consume(
            queue.into(),
            tag.as_str().into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        ),
    )
    .await
    .map_err(call("basic.consume"))??;
    tracing::info!(
        partition = partition.0,
        epoch = lease.epoch().0,
        queue,
        "consuming"
    );
    let waker = context.hooks.waker(partition);
    let mut check = tokio::time::interval(LEASE_CHECK_INTERVAL);
    loop {
        let delivery = tokio::select! {
            delivery = deliveries.next() => delivery,
            () = waker.notified() => { if context.participant.lease(partition).is_none() { break; } continue; }
            _ = check.tick() => { if context.participant.lease(partition).is_none() { break; } continue; }
        };
        let Some(delivery) = delivery else {
            tracing::warn!(partition = partition.0, "the broker cancelled the consumer");
            break;
        };
        if let Next::Stop = handle(context, partition, ledger, delivery?).await? {
            break;
        }
    }
    // No further deliveries; those already sent go back when the channel closes.
    let _ = tokio::time::timeout(
        CALL_TIMEOUT,
        channel.basic_cancel(tag.as_str().into(), BasicCancelOptions::default()),
    )
    .await;
    Ok(())
}

/// Settles a delivery (ack, nack or reject) within [`CALL_TIMEOUT`]. On a connection the
/// broker has reset, such a call may never complete; a worker waiting on it would never end,
/// and its partition's next tenure, whose worker starts only then, would never consume.
async fn settle<T>(
    what: &'static str,
    call: impl std::future::Future<Output = lapin::Result<T>>,
) -> anyhow::Result<T> {
    Ok(tokio::time::timeout(CALL_TIMEOUT, call)
        .await
        .map_err(|_| anyhow::anyhow!("{what} timed out"))??)
}

/// Applies one delivery under a work permit and acknowledges it once committed.
async fn handle(
    context: &State,
    partition: PartitionId,
    ledger: &mut Ledger,
    delivery: lapin::message::Delivery,
) -> anyhow::Result<Next> {
    let requeue = BasicNackOptions {
        requeue: true,
        ..BasicNackOptions::default()
    };
    // The permit holds a hand-off of the partition open until this message is settled.
    let Some(permit) = context.participant.permit(partition) else {
        settle("basic.nack", delivery.nack(requeue)).await?;
        return Ok(Next::Stop);
    };
    let event = match Event::decode(&delivery.data) {
        Ok(event) if context.options.layout.partition_of(event.order) == partition => event,
        Ok(event) => {
            tracing::error!(
                partition = partition.0,
                ?event,
                "event on the wrong queue; dropped"
            );
            settle(
                "basic.reject",
                delivery.reject(BasicRejectOptions::default()),
            )
            .await?;
            return Ok(Next::Continue);
        }
        Err(error) => {
            tracing::error!(partition = partition.0, %error, "unreadable message; dropped");
            settle(
                "basic.reject",
                delivery.reject(BasicRejectOptions::default()),
            )
            .await?;
            return Ok(Next::Continue);
        }
    };
    let id = context.options.id.to_string();
    let outcome = tokio::time::timeout(
        CALL_TIMEOUT,
        ledger.apply(partition, permit.epoch(), event, &id),
    )
    .await
    .map_err(|_| anyhow::anyhow!("applying an event timed out"))??;
    match outcome {
        Outcome::Applied | Outcome::Duplicate => {
            settle("basic.ack", delivery.ack(BasicAckOptions::default())).await?;
            Ok(Next::Continue)
        }
        Outcome::Gap { last_seq } => {
            tracing::debug!(
                order = event.order,
                seq = event.seq,
                last_seq,
                "predecessor missing; requeued"
            );
            drop(permit);
            tokio::time::sleep(GAP_RETRY_DELAY).await;
            settle("basic.nack", delivery.nack(requeue)).await?;
            Ok(Next::Continue)
        }
        Outcome::Stale { stored } => {
            tracing::warn!(
                partition = partition.0,
                epoch = permit.epoch().0,
                stored,
                "stale write refused: a newer owner has written; stopping"
            );
            settle("basic.nack", delivery.nack(requeue)).await?;
            Ok(Next::Stop)
        }
    }
}
