//! The events on the queues, and which queue each order's events go to.

use anyhow::{bail, Context};
use leasehold::{fnv1a_32, PartitionId};
use serde::{Deserialize, Serialize};

/// The longest queue prefix accepted: AMQP queue names are at most 255 bytes, and the
/// partition number is appended to the prefix.
const MAX_QUEUE_PREFIX_BYTES: usize = 200;

/// One event of one order: the consumer applies an order's events strictly in `seq` order,
/// starting at 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// The order the event belongs to.
    pub order: u32,
    /// The event's place among its order's events, from 1.
    pub seq: u32,
}

impl Event {
    /// The routing key of the order: what the producer hashes to pick the queue, exactly as
    /// a leasehold `Router` would hash it to find the partition's owner.
    pub fn order_key(order: u32) -> String {
        format!("order-{order}")
    }

    /// Reads an event from a message body.
    pub fn decode(body: &[u8]) -> anyhow::Result<Event> {
        let event: Event = serde_json::from_slice(body).context("message is not an event")?;
        if event.seq == 0 {
            bail!("event of order {} has sequence number 0", event.order);
        }
        Ok(event)
    }
}

/// How orders map to partitions and partitions to queues.
#[derive(Debug, Clone)]
pub struct Layout {
    prefix: String,
    partitions: u32,
}

impl Layout {
    /// A layout of `partitions` queues named `<prefix>-0` … `<prefix>-<partitions − 1>`.
    pub fn new(prefix: &str, partitions: u32) -> anyhow::Result<Layout> {
        if partitions == 0 {
            bail!("--partitions must be at least 1");
        }
        let valid = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
        if prefix.is_empty() || prefix.len() > MAX_QUEUE_PREFIX_BYTES || !prefix.chars().all(valid)
        {
            bail!(
                "queue prefix {prefix:?} must be 1 to {MAX_QUEUE_PREFIX_BYTES} letters, digits, \
                 '-', '_' or '.'"
            );
        }
        Ok(Layout {
            prefix: prefix.to_owned(),
            partitions,
        })
    }

    /// How many partitions (and queues) there are.
    pub fn partitions(&self) -> u32 {
        self.partitions
    }

    /// The partition of `order`: leasehold's key-to-partition function (FNV-1a 32-bit over
    /// the key's UTF-8 bytes, modulo the partition count), so a `Router` over the same group
    /// names the consumer that holds this order's queue.
    pub fn partition_of(&self, order: u32) -> PartitionId {
        // `new` refused a zero count, the one input `partition_for_key` rejects; the same
        // arithmetic is done here so that no input can reach that panic.
        PartitionId(fnv1a_32(Event::order_key(order).as_bytes()) % self.partitions)
    }

    /// The queue of `partition`.
    pub fn queue(&self, partition: PartitionId) -> String {
        format!("{}-{}", self.prefix, partition.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_like_leasehold() {
        let layout = Layout::new("orders", 16).unwrap();
        for order in 0..1000 {
            assert_eq!(
                layout.partition_of(order),
                leasehold::partition_for_key(&Event::order_key(order), 16)
            );
        }
        assert_eq!(layout.queue(PartitionId(3)), "orders-3");
    }

    #[test]
    fn refuses_bad_input() {
        assert!(Layout::new("orders", 0).is_err());
        assert!(Layout::new("", 4).is_err());
        assert!(Layout::new("a b", 4).is_err());
        assert!(Event::decode(b"{\"order\":1,\"seq\":0}").is_err());
        assert!(Event::decode(b"not json").is_err());
        assert_eq!(
            Event::decode(b"{\"order\":1,\"seq\":2}").unwrap(),
            Event { order: 1, seq: 2 }
        );
    }
}
