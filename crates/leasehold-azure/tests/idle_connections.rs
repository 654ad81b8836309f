//! A connection left idle longer than the idle timeout is never used again: a server closes
//! idle connections on its own clock, and a call sent on one it is closing fails with a reset
//! whose outcome is unknown.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use leasehold::{GroupName, LeaseStore, PartitionId};
use leasehold_azure::{AccountKey, AzureOptions, AzureTableStore};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Answers the first request on each connection and resets the connection on the second,
/// as a server does when a request reaches a connection it has just closed for idleness.
/// Returns the endpoint and the count of connections accepted.
async fn closing_stub() -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&accepted);
    tokio::spawn(async move {
        while let Ok((connection, _)) = listener.accept().await {
            let first = counter.fetch_add(1, Ordering::SeqCst) == 0;
            tokio::spawn(serve_once(connection, first));
        }
    });
    (format!("http://{address}/devstoreaccount1"), accepted)
}

/// The first connection creates the table (201); every later one finds no record (404).
async fn serve_once(mut connection: TcpStream, first: bool) {
    if !read_request_head(&mut connection).await {
        return;
    }
    let (status, code) = if first {
        (201, "Created")
    } else {
        (404, "ResourceNotFound")
    };
    let body = format!(r#"{{"odata.error":{{"code":"{code}","message":{{"value":"{code}"}}}}}}"#);
    let reply = format!(
        "HTTP/1.1 {status} Stub\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    if connection.write_all(reply.as_bytes()).await.is_err() {
        return;
    }
    if read_request_head(&mut connection).await {
        // A zero linger makes the close a reset, as the client sees from a server that had
        // already given the connection up.
        let _ = connection.set_zero_linger();
        drop(connection);
    }
}

/// Reads up to the end of a request's head (the calls made here carry no body, or one the
/// stub ignores); false at end of stream.
async fn read_request_head(connection: &mut TcpStream) -> bool {
    let mut seen = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if seen.windows(4).any(|w| w == b"\r\n\r\n") {
            return true;
        }
        match connection.read(&mut chunk).await {
            Ok(0) | Err(_) => return false,
            Ok(read) => seen.extend_from_slice(&chunk[..read]),
        }
    }
}

async fn store(endpoint: &str, idle: Duration) -> AzureTableStore {
    // Any key will do: the stub does not check signatures.
    let key = AccountKey::from_base64("c3R1Yi1rZXk=").unwrap();
    let options = AzureOptions::from_url(&format!("azure+{endpoint}/leases"))
        .unwrap()
        .key(key)
        .idle_timeout(idle);
    AzureTableStore::connect(options)
        .await
        .expect("the stub creates the table")
}

#[tokio::test]
async fn calls_after_the_idle_timeout_open_a_new_connection() {
    let (endpoint, accepted) = closing_stub().await;
    let store = store(&endpoint, Duration::from_millis(50)).await;
    let group = GroupName::new("orders").unwrap();
    for call in 1..=3 {
        // Longer than the idle timeout, so the connection the last call used is stale; a
        // longer wait on a busy machine changes nothing.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let read = store.get_lease(&group, PartitionId(1)).await;
        assert!(matches!(read, Ok(None)), "call {call}: {read:?}");
    }
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        4,
        "one connection per call"
    );
}

#[tokio::test]
async fn the_default_idle_timeout_is_under_azurites_five_seconds() {
    assert!(AzureOptions::DEFAULT_IDLE_TIMEOUT < Duration::from_secs(5));
    let (endpoint, _) = closing_stub().await;
    let store = store(&endpoint, Duration::ZERO).await;
    let group = GroupName::new("orders").unwrap();
    let read = store.get_lease(&group, PartitionId(1)).await;
    assert!(
        matches!(read, Ok(None)),
        "zero reuses no connection: {read:?}"
    );
}
