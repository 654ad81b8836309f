//! Overload and failure answers from the service, played by a local HTTP stub, map to the
//! errors that make callers back off.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use leasehold::{
    GroupName, LeaseRecord, LeaseStore, LeaseWrite, PartitionId, PutMode, StoreError, Version,
};
use leasehold_azure::{AccountKey, AzureOptions, AzureTableStore};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the stub does with the next request.
#[derive(Clone, Copy)]
enum Answer {
    Status(u16, &'static str),
    /// A write applied, with this ETag.
    Written(&'static str),
    /// Reads the request and never answers.
    Stall,
}

/// Serves scripted answers, one per request, in order, on 127.0.0.1.
async fn stub(answers: Vec<Answer>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let answers = Arc::new(Mutex::new(VecDeque::from(answers)));
    tokio::spawn(async move {
        while let Ok((connection, _)) = listener.accept().await {
            tokio::spawn(serve(connection, Arc::clone(&answers)));
        }
    });
    format!("http://{address}/devstoreaccount1")
}

async fn serve(mut connection: TcpStream, answers: Arc<Mutex<VecDeque<Answer>>>) {
    let mut buffer = Vec::new();
    loop {
        let Some(request_len) = read_request(&mut connection, &mut buffer).await else {
            return;
        };
        buffer.drain(..request_len);
        let answer = answers.lock().unwrap().pop_front();
        let (status, code) = match answer {
            Some(Answer::Written(etag)) => {
                let reply =
                    format!("HTTP/1.1 204 Stub\r\nETag: {etag}\r\nContent-Length: 0\r\n\r\n");
                if connection.write_all(reply.as_bytes()).await.is_err() {
                    return;
                }
                continue;
            }
            Some(Answer::Status(status, code)) => (status, code),
            Some(Answer::Stall) => {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                return;
            }
            None => (500, "NoMoreAnswers"),
        };
        let body =
            format!(r#"{{"odata.error":{{"code":"{code}","message":{{"value":"{code}"}}}}}}"#);
        let reply = format!(
            "HTTP/1.1 {status} Stub\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        if connection.write_all(reply.as_bytes()).await.is_err() {
            return;
        }
    }
}

/// Reads one whole request into `buffer`, returning its length, or `None` at end of stream.
async fn read_request(connection: &mut TcpStream, buffer: &mut Vec<u8>) -> Option<usize> {
    loop {
        if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buffer[..end]).to_ascii_lowercase();
            let body_len: usize = head
                .lines()
                .find_map(|line| line.strip_prefix("content-length:"))
                .map(|value| value.trim().parse().unwrap())
                .unwrap_or(0);
            if buffer.len() >= end + 4 + body_len {
                return Some(end + 4 + body_len);
            }
        }
        let mut chunk = [0u8; 4096];
        match connection.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(read) => buffer.extend_from_slice(&chunk[..read]),
        }
    }
}

async fn store_against(answers: Vec<Answer>) -> AzureTableStore {
    let endpoint = stub(answers).await;
    // Any key will do: the stub does not check signatures.
    let key = AccountKey::from_base64("c3R1Yi1rZXk=").unwrap();
    let options = AzureOptions::from_url(&format!("azure+{endpoint}/leases"))
        .unwrap()
        .key(key)
        .call_timeout(Duration::from_millis(800));
    AzureTableStore::connect(options)
        .await
        .expect("the stub creates the table")
}

#[tokio::test]
async fn busy_and_throttled_answers_are_throttled() {
    let store = store_against(vec![
        Answer::Status(201, "Created"),
        Answer::Status(503, "ServerBusy"),
        Answer::Status(429, "TooManyRequests"),
        Answer::Status(503, "ServerBusy"),
    ])
    .await;
    let group = GroupName::new("orders").unwrap();
    let read = store.list_leases(&group).await;
    assert!(
        matches!(read, Err(StoreError::Throttled { .. })),
        "{read:?}"
    );
    let write = store
        .put_lease(
            &group,
            PartitionId(1),
            &LeaseRecord::released(),
            PutMode::Create,
        )
        .await;
    assert!(
        matches!(write, Err(StoreError::Throttled { .. })),
        "{write:?}"
    );
    let writes: Vec<LeaseWrite> = (0..3)
        .map(|partition| LeaseWrite {
            partition: PartitionId(partition),
            record: LeaseRecord::released(),
            mode: PutMode::Update(Version::from_tag("W/\"x\"")),
        })
        .collect();
    let batch = store.put_leases(&group, &writes).await;
    assert!(
        matches!(batch, Err(StoreError::Throttled { .. })),
        "{batch:?}"
    );
}

/// A batch written one record at a time (it names a partition twice) that fails partway
/// keeps what the writes before learned.
#[tokio::test]
async fn a_batch_failing_partway_keeps_the_earlier_results() {
    let store = store_against(vec![
        Answer::Status(201, "Created"),
        Answer::Written("W/\"datetime'1'\""),
        Answer::Status(503, "ServerBusy"),
    ])
    .await;
    let group = GroupName::new("orders").unwrap();
    let writes: Vec<LeaseWrite> = [0, 1, 0]
        .map(|partition| LeaseWrite {
            partition: PartitionId(partition),
            record: LeaseRecord::released(),
            mode: PutMode::Update(Version::from_tag("W/\"x\"")),
        })
        .into();
    let results = store.put_leases(&group, &writes).await.unwrap();
    assert_eq!(
        results[0].as_ref().ok(),
        Some(&Version::from_tag("W/\"datetime'1'\""))
    );
    for unknown in &results[1..] {
        assert!(
            matches!(unknown, Err(StoreError::Throttled { .. })),
            "{unknown:?}"
        );
    }
}

#[tokio::test]
async fn server_errors_are_unavailable_and_silence_times_out() {
    let store = store_against(vec![
        Answer::Status(204, "NoContent"),
        Answer::Status(500, "InternalError"),
        Answer::Stall,
    ])
    .await;
    let group = GroupName::new("orders").unwrap();
    let failed = store.get_lease(&group, PartitionId(1)).await;
    match &failed {
        Err(error @ StoreError::Unavailable { .. }) => {
            let source = std::error::Error::source(error).expect("the service error is the source");
            assert!(source.to_string().contains("InternalError"), "{source}");
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    let started = Instant::now();
    let silent = store.get_lease(&group, PartitionId(1)).await;
    assert!(matches!(silent, Err(StoreError::Timeout(_))), "{silent:?}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn an_unreachable_endpoint_is_unavailable() {
    // Bind then drop a listener so that the port is very likely closed.
    let port = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let key = AccountKey::from_base64("c3R1Yi1rZXk=").unwrap();
    let url = format!("azure+http://127.0.0.1:{port}/acct/leases");
    let options = AzureOptions::from_url(&url).unwrap().key(key);
    let result = AzureTableStore::connect(options).await;
    assert!(
        matches!(result, Err(StoreError::Unavailable { .. })),
        "{result:?}"
    );
}
