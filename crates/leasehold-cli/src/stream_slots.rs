//! Slots for event streams: a cap on streams served at once, and a smaller one per peer
//! address, so that one client cannot take every slot and leave the others (a worker's own
//! stream, an operator's page) refused.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use axum::extract::ConnectInfo;
use axum::http::Extensions;

/// The slots of one server.
#[derive(Debug)]
pub struct StreamSlots {
    total: usize,
    per_peer: usize,
    open: Mutex<Open>,
}

#[derive(Debug, Default)]
struct Open {
    total: usize,
    by_peer: HashMap<IpAddr, usize>,
}

/// One stream's slot, given back when dropped (when the stream ends).
#[derive(Debug)]
pub struct Slot {
    slots: Arc<StreamSlots>,
    peer: Option<IpAddr>,
}

impl StreamSlots {
    /// At most `total` streams at once, and `per_peer` from one address.
    pub fn new(total: usize, per_peer: usize) -> Arc<StreamSlots> {
        Arc::new(StreamSlots {
            total,
            per_peer,
            open: Mutex::default(),
        })
    }

    /// A slot for the stream a request with `extensions` asks for, counted against its
    /// peer's address (the server puts it there as axum's `ConnectInfo`), or why not.
    pub fn take_for(self: &Arc<Self>, extensions: &Extensions) -> Result<Slot, String> {
        let peer = extensions.get::<ConnectInfo<SocketAddr>>();
        self.take(peer.map(|ConnectInfo(peer)| *peer))
    }

    /// A slot for a stream to `peer` (unknown: counted in the total only), or why not.
    pub fn take(self: &Arc<Self>, peer: Option<SocketAddr>) -> Result<Slot, String> {
        let peer = peer.map(|address| address.ip());
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if open.total >= self.total {
            return Err(format!(
                "{} event streams are open; try again later",
                self.total
            ));
        }
        if let Some(ip) = peer {
            let mine = open.by_peer.entry(ip).or_default();
            if *mine >= self.per_peer {
                return Err(format!(
                    "{} event streams are open from {ip}; close one first",
                    self.per_peer
                ));
            }
            *mine += 1;
        }
        open.total += 1;
        Ok(Slot {
            slots: Arc::clone(self),
            peer,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.slots.open.lock().unwrap_or_else(|e| e.into_inner());
        open.total -= 1;
        if let Some(ip) = self.peer {
            if let Some(count) = open.by_peer.get_mut(&ip) {
                *count -= 1;
                if *count == 0 {
                    open.by_peer.remove(&ip);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_peer_cannot_take_every_slot_and_slots_come_back() {
        let slots = StreamSlots::new(4, 2);
        let one: SocketAddr = "10.0.0.1:1000".parse().unwrap();
        let two: SocketAddr = "10.0.0.2:1000".parse().unwrap();
        let a = slots.take(Some(one)).unwrap();
        let _b = slots.take(Some(one)).unwrap();
        let refused = slots.take(Some(one)).unwrap_err();
        assert!(refused.contains("from 10.0.0.1"), "{refused}");
        let _c = slots.take(Some(two)).unwrap();
        let _d = slots.take(None).unwrap();
        let full = slots.take(Some(two)).unwrap_err();
        assert!(full.contains("4 event streams"), "{full}");
        drop(a);
        slots.take(Some(one)).expect("the slot given back");
    }
}
