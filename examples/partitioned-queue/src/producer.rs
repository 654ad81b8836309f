//! Publishes every order's events, in sequence, to its partition's queue.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::PublisherConfirm;
use lapin::{BasicProperties, Channel, Connection};

use crate::event::{Event, Layout};

/// Publishes not yet confirmed by the broker, at most: bounds memory and keeps the broker's
/// flow control in charge of the pace.
const MAX_UNCONFIRMED: usize = 512;

/// How long the broker may take to confirm one publish.
const CONFIRM_TIMEOUT: Duration = Duration::from_secs(30);

/// AMQP delivery mode 2: the broker writes the message to disk, so it survives a restart of
/// the broker along with its durable queue.
const PERSISTENT: u8 = 2;

/// What the producer is asked to publish.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The queues.
    pub layout: Layout,
    /// Orders `0..orders`.
    pub orders: u32,
    /// Events `1..=events_per_order` of each order.
    pub events_per_order: u32,
}

/// Declares the durable queues of `layout` on `channel`.
pub async fn declare_queues(channel: &Channel, layout: &Layout) -> anyhow::Result<()> {
    for partition in 0..layout.partitions() {
        let queue = layout.queue(leasehold::PartitionId(partition));
        channel
            .queue_declare(
                queue.as_str().into(),
                QueueDeclareOptions {
                    durable: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .with_context(|| format!("cannot declare queue {queue}"))?;
    }
    Ok(())
}

async fn confirmed(confirm: PublisherConfirm) -> anyhow::Result<()> {
    let confirmation = tokio::time::timeout(CONFIRM_TIMEOUT, confirm)
        .await
        .context("the broker did not confirm a publish in time")?
        .context("publish failed")?;
    if !confirmation.is_ack() {
        bail!("the broker refused a publish");
    }
    Ok(())
}

/// Publishes the plan's events over `connection` with publisher confirms, seq 1 of every
/// order first, then seq 2, and so on, so each queue interleaves many orders. Returns once
/// the broker has confirmed every event.
pub async fn publish(connection: &Connection, plan: &Plan) -> anyhow::Result<u64> {
    let channel = connection.create_channel().await?;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await?;
    declare_queues(&channel, &plan.layout).await?;
    let started = Instant::now();
    let mut pending = VecDeque::with_capacity(MAX_UNCONFIRMED);
    let mut published = 0u64;
    for seq in 1..=plan.events_per_order {
        for order in 0..plan.orders {
            let queue = plan.layout.queue(plan.layout.partition_of(order));
            let body = serde_json::to_vec(&Event { order, seq })?;
            if pending.len() == MAX_UNCONFIRMED {
                if let Some(oldest) = pending.pop_front() {
                    confirmed(oldest).await?;
                }
            }
            let confirm = channel
                .basic_publish(
                    "".into(),
                    queue.as_str().into(),
                    BasicPublishOptions::default(),
                    &body,
                    BasicProperties::default().with_delivery_mode(PERSISTENT),
                )
                .await?;
            pending.push_back(confirm);
            published += 1;
        }
    }
    for confirm in pending {
        confirmed(confirm).await?;
    }
    tracing::info!(
        published,
        elapsed_ms = started.elapsed().as_millis(),
        "every event confirmed"
    );
    let _ = channel.close(200, "done".into()).await;
    Ok(published)
}
