//! The limits every server has: slow and idle clients are cut off, connections beyond the
//! cap are closed at once, slow handlers answer 503, and a shutdown lets requests in flight
//! finish.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::routing::get;
use leasehold_process::serve::{self, Limits, Server};

/// Requests of `/while` being handled, so far.
static HANDLING: AtomicUsize = AtomicUsize::new(0);

/// Generous for a loaded machine: what is cut off must be cut off well within it.
const LIMIT: Duration = Duration::from_secs(20);

fn limits() -> Limits {
    Limits {
        header_read_timeout: Duration::from_millis(500),
        request_timeout: Duration::from_millis(300),
        max_connections: 8,
        stalled_reader_timeout: Duration::from_secs(5),
    }
}

async fn start() -> (Server, u16) {
    let router = axum::Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(5)).await;
                "late"
            }),
        )
        .route(
            "/endless",
            get(|| async {
                // A body that never ends, as an event stream to a reader that never reads.
                let chunk = axum::body::Bytes::from(vec![b'x'; 64 * 1024]);
                let chunks = futures_util::stream::repeat(Ok::<_, std::convert::Infallible>(chunk));
                axum::body::Body::from_stream(chunks)
            }),
        )
        .route(
            "/while",
            get(|| async {
                HANDLING.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(150)).await;
                "finished"
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    (serve::spawn(listener, router, limits(), "test"), port)
}

/// `GET path` on a new connection: the status line's code, or `None` if the connection
/// was closed without an answer.
fn get_status(port: u16, path: &str) -> Option<u16> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(LIMIT)).ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    answer.split_whitespace().nth(1)?.parse().ok()
}

/// How long until the server closes `stream` (a read returns end of file or fails).
fn closed_after(stream: &mut TcpStream) -> Duration {
    stream.set_read_timeout(Some(LIMIT)).unwrap();
    let started = Instant::now();
    let mut buffer = [0u8; 256];
    loop {
        match stream.read(&mut buffer) {
            Ok(0) | Err(_) => return started.elapsed(),
            Ok(_) => {}
        }
        assert!(started.elapsed() < LIMIT, "still open after {LIMIT:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_sending_its_headers_a_byte_at_a_time_is_cut_off() {
    let (_server, port) = start().await;
    let cut = tokio::task::spawn_blocking(move || {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let started = Instant::now();
        for byte in b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Slow: "
            .iter()
            .cycle()
        {
            if stream.write_all(&[*byte]).is_err() {
                return started.elapsed();
            }
            std::thread::sleep(Duration::from_millis(100));
            assert!(started.elapsed() < LIMIT, "still served after {LIMIT:?}");
        }
        unreachable!()
    })
    .await
    .unwrap();
    assert!(cut < LIMIT / 2, "{cut:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_are_closed_and_those_over_the_cap_at_once() {
    let (server, port) = start().await;
    let idle: Vec<TcpStream> = tokio::task::spawn_blocking(move || {
        (0..8)
            .map(|_| TcpStream::connect(("127.0.0.1", port)).unwrap())
            .collect()
    })
    .await
    .unwrap();
    // Wait until all eight are being served, then one more is closed without a word.
    let deadline = Instant::now() + LIMIT;
    while server.open_connections() < 8 {
        assert!(
            Instant::now() < deadline,
            "{} open",
            server.open_connections()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let refused = tokio::task::spawn_blocking(move || get_status(port, "/healthz"))
        .await
        .unwrap();
    assert_eq!(refused, None);
    assert_eq!(server.refused(), 1);
    // The idle ones are closed by the header-read timeout, and the server answers again.
    let closed = tokio::task::spawn_blocking(move || {
        idle.into_iter()
            .map(|mut stream| closed_after(&mut stream))
            .max()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(closed < LIMIT / 2, "{closed:?}");
    let answered = tokio::task::spawn_blocking(move || get_status(port, "/healthz"))
        .await
        .unwrap();
    assert_eq!(answered, Some(200));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_too_slow_answers_503_and_a_shutdown_lets_requests_finish() {
    let (server, port) = start().await;
    let slow = tokio::task::spawn_blocking(move || get_status(port, "/slow"))
        .await
        .unwrap();
    assert_eq!(slow, Some(503));

    let in_flight = tokio::task::spawn_blocking(move || get_status(port, "/while"));
    let deadline = Instant::now() + LIMIT;
    while HANDLING.load(Ordering::SeqCst) == 0 {
        assert!(Instant::now() < deadline, "the request never arrived");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        server.shutdown(LIMIT).await,
        "every connection closed in time"
    );
    assert_eq!(in_flight.await.unwrap(), Some(200));
    let after = tokio::task::spawn_blocking(move || get_status(port, "/healthz"))
        .await
        .unwrap();
    assert_eq!(after, None, "nothing is accepted after a shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_a_response_is_cut_off() {
    let (server, port) = start().await;
    // Reads the head of an endless body, then nothing: the window closes, and stays closed.
    let reader = tokio::task::spawn_blocking(move || {
        let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
        socket.set_recv_buffer_size(4096)?;
        let address: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
        socket.connect(&address.into())?;
        let mut stream: TcpStream = socket.into();
        stream.write_all(b"GET /endless HTTP/1.1\r\nHost: localhost\r\n\r\n")?;
        let mut head = [0u8; 64];
        stream.read_exact(&mut head)?;
        std::io::Result::Ok(stream)
    })
    .await
    .unwrap()
    .unwrap();
    let deadline = Instant::now() + LIMIT;
    while server.open_connections() > 0 {
        assert!(Instant::now() < deadline, "still served after {LIMIT:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(reader);
}
