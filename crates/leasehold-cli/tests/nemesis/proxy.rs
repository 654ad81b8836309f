//! A TCP proxy on loopback between one node and its store, whose link the schedule degrades:
//! latency added to every chunk each way, losses (a chunk held back as a retransmission
//! would be), and cuts, both ways or of the replies only. A cut stops forwarding, as a
//! partition does: the bytes wait in the sockets' buffers, and the connections hang until
//! the client's own time limits give up on them or the link heals.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// How long a pump waits between looks at a cut link: the granularity of a heal.
const POLL: Duration = Duration::from_millis(5);

/// The state of one link, changed by the schedule while the pumps read it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct LinkState {
    /// Requests (node to store) stop.
    pub requests_cut: bool,
    /// Replies (store to node) stop.
    pub replies_cut: bool,
    /// Added to each chunk's trip, each way.
    pub latency: Duration,
    /// Probability that a chunk is held back as a lost segment would be, 200 ms to 1.6 s.
    pub loss: f64,
}

impl LinkState {
    /// Nothing gets through either way.
    pub const CUT: LinkState = LinkState {
        requests_cut: true,
        replies_cut: true,
        latency: Duration::ZERO,
        loss: 0.0,
    };
}

/// One proxy: listens on a free loopback port and forwards to `upstream`.
pub struct Proxy {
    pub address: String,
    state: Arc<Mutex<LinkState>>,
    stop: Arc<AtomicBool>,
}

impl Proxy {
    /// Starts forwarding to `upstream` (`HOST:PORT`).
    pub fn start(upstream: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a proxy port");
        let address = listener.local_addr().expect("proxy address").to_string();
        let state = Arc::new(Mutex::new(LinkState::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (upstream, shared, stopping) =
            (upstream.to_owned(), Arc::clone(&state), Arc::clone(&stop));
        listener
            .set_nonblocking(true)
            .expect("non-blocking listener");
        thread::spawn(move || {
            let mut seed = 0x9E37_79B9_7F4A_7C15_u64
                ^ u64::from(listener.local_addr().map_or(0, |a| a.port()));
            while !stopping.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((client, _)) => {
                        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
                        connect(client, &upstream, &shared, &stopping, seed);
                    }
                    Err(_) => thread::sleep(POLL),
                }
            }
        });
        Proxy {
            address,
            state,
            stop,
        }
    }

    /// Sets the link's state from now on.
    pub fn set(&self, state: LinkState) {
        *self.state.lock().unwrap() = state;
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Joins `client` to a new connection to `upstream` with one pump each way.
fn connect(
    client: TcpStream,
    upstream: &str,
    state: &Arc<Mutex<LinkState>>,
    stop: &Arc<AtomicBool>,
    seed: u64,
) {
    let Ok(server) = TcpStream::connect(upstream) else {
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let pairs = [
        (client.try_clone(), server.try_clone(), true),
        (server.try_clone(), client.try_clone(), false),
    ];
    for (i, (from, to, requests)) in pairs.into_iter().enumerate() {
        let (Ok(from), Ok(to)) = (from, to) else {
            return;
        };
        let (state, stop) = (Arc::clone(state), Arc::clone(stop));
        let seed = seed ^ (i as u64 + 1).wrapping_mul(0xA24B_AED4_963E_E407);
        thread::spawn(move || pump(from, to, requests, &state, &stop, seed));
    }
}

/// Forwards chunks from `from` to `to` under the link's state, in order: a reader stamps
/// each chunk as it arrives and a writer sends it on once its delay from that stamp has
/// passed, so that the chunks of one message are delayed once, not once each.
fn pump(
    mut from: TcpStream,
    mut to: TcpStream,
    requests: bool,
    state: &Arc<Mutex<LinkState>>,
    stop: &Arc<AtomicBool>,
    mut seed: u64,
) {
    let cut = move |state: &LinkState| {
        (requests && state.requests_cut) || (!requests && state.replies_cut)
    };
    // Bounded: a writer held back by a cut stops the reader too, as a full window would.
    let (sender, receiver) = std::sync::mpsc::sync_channel::<(Instant, Vec<u8>)>(256);
    let (reader_state, reader_stop) = (Arc::clone(state), Arc::clone(stop));
    let reader = thread::spawn(move || {
        let mut buffer = vec![0_u8; 64 * 1024];
        // Reads are bounded so that a reader of a dead proxy notices its end.
        let _ = from.set_read_timeout(Some(Duration::from_millis(200)));
        while !reader_stop.load(Ordering::Relaxed) {
            // A cut direction reads nothing more: the sender's buffers fill as on a partition.
            if cut(&reader_state.lock().unwrap()) {
                thread::sleep(POLL);
                continue;
            }
            match from.read(&mut buffer) {
                Ok(0) => break,
                Ok(read) => {
                    if sender
                        .send((Instant::now(), buffer[..read].to_vec()))
                        .is_err()
                    {
                        break;
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => break,
            }
        }
        let _ = from.shutdown(Shutdown::Read);
    });
    while let Ok((arrived, chunk)) = receiver.recv() {
        let current = *state.lock().unwrap();
        let mut delay = current.latency / 2;
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        if (seed % 10_000) as f64 / 10_000.0 < current.loss {
            // A lost segment: resent after a retransmission time-out, doubling 1 to 3 times.
            delay += Duration::from_millis(200 << (seed % 4));
        }
        // Cut meanwhile: the chunk waits with the rest.
        loop {
            let blocked = cut(&state.lock().unwrap());
            if (!blocked && arrived.elapsed() >= delay) || stop.load(Ordering::Relaxed) {
                break;
            }
            thread::sleep(POLL);
        }
        if to.write_all(&chunk).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
    drop(receiver);
    let _ = reader.join();
}
