//! Signed HTTP requests to the Table service, and what its status codes mean to callers.

use std::time::{Duration, SystemTime};

use leasehold::{RecordKey, StoreError};
use reqwest::header::{HeaderMap, HeaderValue};
use reqwest::{Method, StatusCode, Url};

use crate::options::{AccountKey, AzureOptions};
use crate::signing::{authorization, Signed};

/// The Table service REST version these requests are written for.
const SERVICE_VERSION: &str = "2019-02-02";
/// Minimal metadata rather than none: it is the level at which the service includes each
/// entity's `odata.etag` in query results, and listings need every record's version.
const ACCEPT: &str = "application/json;odata=minimalmetadata";
pub(crate) const JSON: &str = "application/json";

/// What the service answered with a status the caller did not expect.
#[derive(Debug, thiserror::Error)]
#[error("Azure Table Storage answered {status}{}", code.as_deref().map(|c| format!(" ({c})")).unwrap_or_default())]
pub(crate) struct ServiceError {
    pub(crate) status: StatusCode,
    /// The service's error code, such as `UpdateConditionNotSatisfied`.
    pub(crate) code: Option<String>,
}

/// A reply: status, ETag and body.
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Vec<u8>,
}

impl Reply {
    pub(crate) fn etag(&self) -> Option<&str> {
        self.headers
            .get("etag")
            .and_then(|value| value.to_str().ok())
    }

    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|value| value.to_str().ok())
    }

    fn service_error(&self) -> ServiceError {
        let code = serde_json::from_slice::<serde_json::Value>(&self.body)
            .ok()
            .and_then(|body| {
                body.pointer("/odata.error/code")
                    .and_then(|code| code.as_str())
                    .map(str::to_owned)
            });
        ServiceError {
            status: self.status,
            code,
        }
    }

    /// The error for a status the call did not expect, with `key` naming the record.
    pub(crate) fn error(&self, key: &RecordKey) -> StoreError {
        status_error(self.service_error(), key)
    }
}

/// Maps a status to what the caller can do about it.
pub(crate) fn status_error(error: ServiceError, key: &RecordKey) -> StoreError {
    let key = || key.clone();
    match error.status {
        StatusCode::NOT_FOUND => StoreError::NotFound { key: key() },
        StatusCode::CONFLICT => StoreError::AlreadyExists { key: key() },
        StatusCode::PRECONDITION_FAILED => StoreError::Conflict { key: key() },
        // 503 is how the service says ServerBusy: both mean "slow down".
        StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE => StoreError::Throttled {
            message: error.to_string(),
        },
        StatusCode::BAD_REQUEST => StoreError::Invalid(error.to_string()),
        _ => StoreError::unavailable("Azure Table Storage request failed", error),
    }
}

/// Makes the client trust only the authorities in the PEM file at `path`.
#[cfg(feature = "rustls")]
fn trust_only(
    builder: reqwest::ClientBuilder,
    path: &std::path::Path,
) -> Result<reqwest::ClientBuilder, StoreError> {
    let shown = path.display();
    let pem = std::fs::read(path)
        .map_err(|error| StoreError::Invalid(format!("cannot read CA file {shown}: {error}")))?;
    let certificates = reqwest::Certificate::from_pem_bundle(&pem)
        .map_err(|error| StoreError::Invalid(format!("CA file {shown}: {error}")))?;
    if certificates.is_empty() {
        return Err(StoreError::Invalid(format!(
            "CA file {shown} holds no PEM certificate"
        )));
    }
    Ok(builder.tls_certs_only(certificates))
}

#[cfg(not(feature = "rustls"))]
fn trust_only(
    _builder: reqwest::ClientBuilder,
    path: &std::path::Path,
) -> Result<reqwest::ClientBuilder, StoreError> {
    Err(StoreError::Invalid(format!(
        "CA file {} given, but this build has no HTTPS: enable leasehold-azure's rustls feature",
        path.display()
    )))
}

/// An HTTP client bound to one account and table.
#[derive(Debug)]
pub(crate) struct TableClient {
    http: reqwest::Client,
    account: String,
    key: AccountKey,
    base: String,
    table: String,
    call_timeout: Duration,
}

impl TableClient {
    /// A client for the table `config` names; `config` was validated, so it holds a key.
    pub(crate) fn new(config: &AzureOptions) -> Result<TableClient, StoreError> {
        let mut builder = reqwest::Client::builder()
            .timeout(config.call_timeout)
            .connect_timeout(config.connect_timeout)
            .pool_idle_timeout(config.idle_timeout);
        if let Some(path) = &config.ca_file {
            builder = trust_only(builder, path)?;
        }
        let http = builder
            .build()
            .map_err(|error| StoreError::unavailable("cannot build the HTTP client", error))?;
        let base = config.endpoint_url();
        Url::parse(&base).map_err(|error| {
            StoreError::Invalid(format!("endpoint {base:?} is not a URL: {error}"))
        })?;
        Ok(TableClient {
            http,
            account: config.account.clone(),
            key: config.key.clone().expect("validated options hold a key"),
            base,
            table: config.table.clone(),
            call_timeout: config.call_timeout,
        })
    }

    pub(crate) fn table(&self) -> &str {
        &self.table
    }

    /// `<endpoint>/<path>`; `path` holds only characters that need no escaping.
    pub(crate) fn url(&self, path: &str) -> Url {
        Url::parse(&format!("{}/{path}", self.base)).expect("the endpoint was checked to be a URL")
    }

    /// The URL of one entity of the table.
    pub(crate) fn entity_url(&self, partition_key: &str, row_key: &str) -> Url {
        self.url(&format!(
            "{}(PartitionKey='{}',RowKey='{}')",
            self.table,
            quote(partition_key),
            quote(row_key)
        ))
    }

    /// Sends one signed request. Transport failures are `Unavailable`, running out of time
    /// is `Timeout`; every status comes back as a [`Reply`] for the caller to judge.
    pub(crate) async fn send(
        &self,
        method: Method,
        url: Url,
        body: Option<(&str, Vec<u8>)>,
        extra: &[(&'static str, String)],
    ) -> Result<Reply, StoreError> {
        let date = httpdate::fmt_http_date(SystemTime::now());
        let content_type = body.as_ref().map(|(kind, _)| *kind).unwrap_or("");
        let signed = Signed {
            verb: method.as_str(),
            content_type,
            date: &date,
            url: &url,
        };
        let authorization = authorization(&self.account, &self.key, &signed);
        let mut request = self
            .http
            .request(method, url)
            .header("x-ms-date", &date)
            .header("x-ms-version", SERVICE_VERSION)
            .header("Accept", ACCEPT)
            .header("DataServiceVersion", "3.0")
            .header("MaxDataServiceVersion", "3.0;NetFx")
            .header("Authorization", sensitive(&authorization)?);
        for (name, value) in extra {
            request = request.header(*name, value);
        }
        if let Some((kind, bytes)) = body {
            request = request.header("Content-Type", kind).body(bytes);
        }
        let response = request
            .send()
            .await
            .map_err(|error| self.transport(error))?;
        let status = response.status();
        let headers = response.headers().clone();
        let body = response
            .bytes()
            .await
            .map_err(|error| self.transport(error))?;
        Ok(Reply {
            status,
            headers,
            body: body.to_vec(),
        })
    }

    fn transport(&self, error: reqwest::Error) -> StoreError {
        if error.is_timeout() {
            StoreError::Timeout(self.call_timeout)
        } else {
            // The outermost message only names the URL; an operator needs the root cause
            // (refused connection, untrusted certificate, unknown host).
            let mut cause: &dyn std::error::Error = &error;
            while let Some(source) = cause.source() {
                cause = source;
            }
            let message = format!("cannot reach Azure Table Storage: {cause}");
            StoreError::unavailable(message, error)
        }
    }
}

/// Marks the header so that it is left out of any debug output of the request.
fn sensitive(value: &str) -> Result<HeaderValue, StoreError> {
    let mut header = HeaderValue::from_str(value)
        .map_err(|_| StoreError::Invalid("account name is not a valid header value".to_owned()))?;
    header.set_sensitive(true);
    Ok(header)
}

/// Doubles single quotes, as OData string literals need.
pub(crate) fn quote(value: &str) -> String {
    value.replace('\'', "''")
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold::PartitionId;

    fn mapped(status: u16) -> StoreError {
        status_error(
            ServiceError {
                status: StatusCode::from_u16(status).unwrap(),
                code: Some("SomeCode".to_owned()),
            },
            &RecordKey::Lease(PartitionId(1)),
        )
    }

    #[test]
    fn statuses_map_to_what_callers_can_do() {
        assert!(
            matches!(mapped(404), StoreError::NotFound { key } if key == RecordKey::Lease(PartitionId(1)))
        );
        assert!(matches!(mapped(409), StoreError::AlreadyExists { .. }));
        assert!(matches!(mapped(412), StoreError::Conflict { .. }));
        assert!(matches!(mapped(429), StoreError::Throttled { .. }));
        assert!(matches!(mapped(503), StoreError::Throttled { .. }));
        assert!(matches!(mapped(400), StoreError::Invalid(_)));
        for status in [500, 502, 504, 403] {
            let error = mapped(status);
            assert!(
                matches!(
                    error,
                    StoreError::Unavailable {
                        source: Some(_),
                        ..
                    }
                ),
                "{status}: {error:?}"
            );
            let source = std::error::Error::source(&error).unwrap().to_string();
            assert!(
                source.contains(&status.to_string()) && source.contains("SomeCode"),
                "{source}"
            );
        }
    }

    #[test]
    fn error_codes_are_read_from_the_body() {
        let reply = Reply {
            status: StatusCode::PRECONDITION_FAILED,
            headers: HeaderMap::new(),
            body:
                br#"{"odata.error":{"code":"UpdateConditionNotSatisfied","message":{"value":"x"}}}"#
                    .to_vec(),
        };
        assert_eq!(
            reply.service_error().code.as_deref(),
            Some("UpdateConditionNotSatisfied")
        );
    }
}
