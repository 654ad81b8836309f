//! Entity-group transactions (`$batch`): one node's renewals, or one multi-record
//! transaction, in one request.
//!
//! The request is a `multipart/mixed` body holding one changeset; each part is a complete
//! HTTP request for one entity. The service applies the whole changeset or none of it, and
//! answers with one HTTP response per part, or a single one for the part that failed, whose
//! error message starts with that part's index.

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
    /// The index of the operation this response is about, when the service says.
    pub(crate) operation: Option<usize>,
    /// The service's error code, such as `UpdateConditionNotSatisfied`.
    pub(crate) code: Option<String>,
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

/// The status line, ETag and error of every HTTP response inside a batch reply, in order.
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
        let (mut etag, mut content_id) = (None, None);
        for header in lines.by_ref() {
            if header.trim().is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                let (name, value) = (name.trim(), value.trim());
                if name.eq_ignore_ascii_case("etag") {
                    etag = Some(value.to_owned());
                } else if name.eq_ignore_ascii_case("content-id") {
                    content_id = value.parse::<usize>().ok();
                }
            }
        }
        let mut content = String::new();
        for body_line in lines.by_ref() {
            if body_line.starts_with("--") {
                break;
            }
            content.push_str(body_line);
        }
        let (code, failed) = error_of(&content);
        parts.push(PartResponse {
            status,
            etag,
            // The service's documented way of naming the failed operation is the index in
            // front of the error message; the echoed Content-ID (numbered from 1 by
            // `build`) only stands in when the message has none.
            operation: failed.or_else(|| content_id?.checked_sub(1)),
            code,
        });
    }
    parts
}

/// The error code of a part's JSON error body, and the operation index that starts its
/// message (`"1:The specified resource does not exist."`).
fn error_of(content: &str) -> (Option<String>, Option<usize>) {
    let Ok(body) = serde_json::from_str::<serde_json::Value>(content) else {
        return (None, None);
    };
    let code = body
        .pointer("/odata.error/code")
        .and_then(serde_json::Value::as_str)
        .map(str::to_owned);
    let index = body
        .pointer("/odata.error/message/value")
        .and_then(serde_json::Value::as_str)
        .and_then(|message| message.split_once(':'))
        .and_then(|(index, _)| index.parse::<usize>().ok());
    (code, index)
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
                    etag: Some("W/\"datetime'a'\"".to_owned()),
                    operation: None,
                    code: None,
                },
                PartResponse {
                    status: StatusCode::PRECONDITION_FAILED,
                    etag: None,
                    operation: None,
                    code: None,
                },
            ]
        );
    }

    /// The service answers a failed changeset with one response, for the operation that
    /// failed: its index leads the error message, and its Content-ID may be echoed too.
    #[test]
    fn a_failed_operation_is_located_by_its_index() {
        let failed = |headers: &str, message: &str| {
            let reply = format!(
                "--batchresponse_1\r\nContent-Type: multipart/mixed; boundary=changesetresponse_1\r\n\r\n\
                --changesetresponse_1\r\nContent-Type: application/http\r\n\r\n\
                HTTP/1.1 412 Precondition Failed\r\n{headers}Content-Type: application/json\r\n\r\n\
                {{\"odata.error\":{{\"code\":\"UpdateConditionNotSatisfied\",\"message\":{{\"lang\":\"en-US\",\"value\":\"{message}\"}}}}}}\r\n\
                --changesetresponse_1--\r\n--batchresponse_1--\r\n"
            );
            let parts = parse_reply(reply.as_bytes());
            assert_eq!(parts.len(), 1, "{reply}");
            assert_eq!(
                parts[0].code.as_deref(),
                Some("UpdateConditionNotSatisfied")
            );
            parts[0].operation
        };
        assert_eq!(
            failed(
                "",
                "3:The update condition specified in the request was not satisfied."
            ),
            Some(3)
        );
        assert_eq!(
            failed("Content-ID: 2\r\n", "1:The update condition."),
            Some(1)
        );
        assert_eq!(
            failed("Content-ID: 2\r\n", "The update condition."),
            Some(1)
        );
        assert_eq!(failed("", "The update condition, at 10:00."), None);
    }
}
