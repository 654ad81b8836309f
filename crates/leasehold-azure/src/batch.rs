//! Entity-group transactions (`$batch`): one node's renewals in one request.
//!
//! The request is a `multipart/mixed` body holding one changeset; each part is a complete
//! HTTP request for one entity. The service applies the whole changeset or none of it, and
//! answers with one HTTP response per part, or a single one for the part that failed.

use std::fmt::Write;

use leasehold::PutMode;
use reqwest::{StatusCode, Url};
use sha2::{Digest, Sha256};

/// The service accepts at most this many operations per changeset.
pub(crate) const MAX_OPERATIONS: usize = 100;

/// One operation of a changeset.
pub(crate) struct Operation<'a> {
    pub(crate) url: Url,
    pub(crate) mode: &'a PutMode,
    pub(crate) entity: Vec<u8>,
}

/// A built `$batch` request body and its content type.
pub(crate) struct BatchBody {
    pub(crate) content_type: String,
    pub(crate) body: Vec<u8>,
}

/// One response inside the batch reply.
#[derive(Debug, PartialEq)]
pub(crate) struct PartResponse {
    pub(crate) status: StatusCode,
    pub(crate) etag: Option<String>,
}

/// Builds the body. Creates are POSTed to the table URL (`table_url`); updates are PUT to the
/// entity URL with `If-Match`.
pub(crate) fn build(table_url: &Url, operations: &[Operation<'_>]) -> BatchBody {
    // A digest of the content cannot occur inside that content, so it makes a safe boundary.
    let mut digest = Sha256::new();
    for operation in operations {
        digest.update(operation.url.as_str());
        digest.update(&operation.entity);
    }
    let hash: String = digest
        .finalize()
        .iter()
        .take(12)
        .map(|b| format!("{b:02x}"))
        .collect();
    let batch = format!("batch_{hash}");
    let changeset = format!("changeset_{hash}");

    let mut body = Vec::new();
    let mut head = String::new();
    let _ = write!(
        head,
        "--{batch}\r\nContent-Type: multipart/mixed; boundary={changeset}\r\n\r\n"
    );
    body.extend_from_slice(head.as_bytes());
    for (index, operation) in operations.iter().enumerate() {
        let mut part = format!(
            "--{changeset}\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\n\r\n"
        );
        match operation.mode {
            PutMode::Create => {
                let _ = write!(
                    part,
                    "POST {table_url} HTTP/1.1\r\nPrefer: return-no-content\r\n"
                );
            }
            PutMode::Update(version) => {
                let etag = version.as_tag().unwrap_or("\"no-such-etag\"");
                let _ = write!(
                    part,
                    "PUT {} HTTP/1.1\r\nIf-Match: {etag}\r\n",
                    operation.url
                );
            }
        }
        let _ = write!(
            part,
            "Content-ID: {}\r\nContent-Type: application/json\r\nAccept: application/json;odata=minimalmetadata\r\nDataServiceVersion: 3.0\r\nContent-Length: {}\r\n\r\n",
            index + 1,
            operation.entity.len()
        );
        body.extend_from_slice(part.as_bytes());
        body.extend_from_slice(&operation.entity);
        body.extend_from_slice(b"\r\n");
    }
    body.extend_from_slice(format!("--{changeset}--\r\n--{batch}--\r\n").as_bytes());
    BatchBody {
        content_type: format!("multipart/mixed; boundary={batch}"),
        body,
    }
}

/// The status line and ETag of every HTTP response inside a batch reply, in order.
pub(crate) fn parse_reply(body: &[u8]) -> Vec<PartResponse> {
    let text = String::from_utf8_lossy(body);
    let mut parts = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let Some(status) = line
            .strip_prefix("HTTP/1.1 ")
            .and_then(|rest| rest.split(' ').next())
            .and_then(|code| code.parse::<u16>().ok())
            .and_then(|code| StatusCode::from_u16(code).ok())
        else {
            continue;
        };
        let mut etag = None;
        for header in lines.by_ref() {
            if header.trim().is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                if name.trim().eq_ignore_ascii_case("etag") {
                    etag = Some(value.trim().to_owned());
                }
            }
        }
        parts.push(PartResponse { status, etag });
    }
    parts
}

#[cfg(test)]
mod tests {
    use leasehold::Version;

    use super::*;

    #[test]
    fn body_holds_one_changeset_with_a_part_per_operation() {
        let table = Url::parse("http://127.0.0.1:10002/acct/leases").unwrap();
        let update = PutMode::Update(Version::from_tag("W/\"datetime'x'\""));
        let create = PutMode::Create;
        let operations = [
            Operation {
                url: Url::parse("http://127.0.0.1:10002/acct/leases(PartitionKey='g',RowKey='lease-0000000001')").unwrap(),
                mode: &update,
                entity: b"{\"a\":1}".to_vec(),
            },
            Operation {
                url: Url::parse("http://127.0.0.1:10002/acct/leases(PartitionKey='g',RowKey='lease-0000000002')").unwrap(),
                mode: &create,
                entity: b"{\"b\":2}".to_vec(),
            },
        ];
        let built = build(&table, &operations);
        let text = String::from_utf8(built.body).unwrap();
        let boundary = built
            .content_type
            .strip_prefix("multipart/mixed; boundary=")
            .unwrap();
        assert!(text.starts_with(&format!("--{boundary}\r\n")));
        assert!(text.ends_with(&format!("--{boundary}--\r\n")));
        assert!(text.contains("PUT http://127.0.0.1:10002/acct/leases(PartitionKey='g',RowKey='lease-0000000001') HTTP/1.1\r\nIf-Match: W/\"datetime'x'\"\r\n"));
        assert!(text.contains("POST http://127.0.0.1:10002/acct/leases HTTP/1.1\r\n"));
        assert_eq!(text.matches("Content-Type: application/http").count(), 2);
    }

    #[test]
    fn reply_parts_are_read_in_order() {
        let reply = "--batchresponse_1\r\nContent-Type: multipart/mixed; boundary=changesetresponse_1\r\n\r\n\
            --changesetresponse_1\r\nContent-Type: application/http\r\n\r\n\
            HTTP/1.1 204 No Content\r\nETag: W/\"datetime'a'\"\r\n\r\n\r\n\
            --changesetresponse_1\r\nContent-Type: application/http\r\n\r\n\
            HTTP/1.1 412 Precondition Failed\r\nContent-Type: application/json\r\n\r\n{}\r\n\
            --changesetresponse_1--\r\n--batchresponse_1--\r\n";
        assert_eq!(
            parse_reply(reply.as_bytes()),
            vec![
                PartResponse {
                    status: StatusCode::NO_CONTENT,
                    etag: Some("W/\"datetime'a'\"".to_owned())
                },
                PartResponse {
                    status: StatusCode::PRECONDITION_FAILED,
                    etag: None
                },
            ]
        );
    }
}
