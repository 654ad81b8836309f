//! Entity operations on the one table: create, conditional replace and delete, read, query.

use leasehold::{PutMode, RecordKey, StoreError, Version};
use reqwest::{Method, StatusCode};
use serde_json::{Map, Value};

use crate::client::{quote, TableClient, JSON};

/// Pages of up to 1,000 entities; a group has one entity per partition plus one per node,
/// so this bounds a listing at ten million entities (and the call timeout bounds it in time).
const MAX_PAGES: usize = 10_000;

/// An entity read back: its properties and its ETag.
pub(crate) struct Entity {
    pub(crate) row_key: String,
    pub(crate) properties: Map<String, Value>,
    pub(crate) etag: String,
}

impl TableClient {
    /// Creates the table, accepting that it already exists.
    pub(crate) async fn ensure_table(&self) -> Result<(), StoreError> {
        let body = serde_json::to_vec(&serde_json::json!({ "TableName": self.table() }))
            .expect("a table name serializes");
        let reply = self
            .send(
                Method::POST,
                self.url("Tables"),
                Some((JSON, body)),
                &[("Prefer", "return-no-content".to_owned())],
            )
            .await?;
        match reply.status {
            StatusCode::CREATED | StatusCode::NO_CONTENT | StatusCode::CONFLICT => Ok(()),
            _ => Err(reply.error(&RecordKey::Stored(format!("table {}", self.table())))),
        }
    }

    /// Writes one entity under `mode`, returning its new ETag.
    pub(crate) async fn put(
        &self,
        partition_key: &str,
        row_key: &str,
        key: &RecordKey,
        entity: &Value,
        mode: &PutMode,
    ) -> Result<Version, StoreError> {
        let body = serde_json::to_vec(entity).expect("entities serialize");
        let reply = match mode {
            PutMode::Create => {
                let url = self.url(self.table());
                let prefer = [("Prefer", "return-no-content".to_owned())];
                self.send(Method::POST, url, Some((JSON, body)), &prefer)
                    .await?
            }
            PutMode::Update(version) => {
                let etag = self.if_match(partition_key, row_key, version, key).await?;
                let url = self.entity_url(partition_key, row_key);
                self.send(Method::PUT, url, Some((JSON, body)), &[("If-Match", etag)])
                    .await?
            }
        };
        if !reply.status.is_success() {
            return Err(reply.error(key));
        }
        reply
            .etag()
            .map(Version::from_tag)
            .ok_or_else(|| missing_etag(key))
    }

    /// Deletes one entity if its ETag is `version`.
    pub(crate) async fn delete(
        &self,
        partition_key: &str,
        row_key: &str,
        key: &RecordKey,
        version: &Version,
    ) -> Result<(), StoreError> {
        let etag = self.if_match(partition_key, row_key, version, key).await?;
        let url = self.entity_url(partition_key, row_key);
        let reply = self
            .send(Method::DELETE, url, None, &[("If-Match", etag)])
            .await?;
        if reply.status.is_success() {
            Ok(())
        } else {
            Err(reply.error(key))
        }
    }

    /// Merges properties into an existing entity whatever its ETag. For repair tools and tests only.
    pub(crate) async fn merge_unconditionally(
        &self,
        partition_key: &str,
        row_key: &str,
        key: &RecordKey,
        entity: &Value,
    ) -> Result<(), StoreError> {
        let body = serde_json::to_vec(entity).expect("entities serialize");
        let url = self.entity_url(partition_key, row_key);
        let reply = self
            .send(
                Method::from_bytes(b"MERGE").expect("MERGE is a valid method"),
                url,
                Some((JSON, body)),
                &[("If-Match", "*".to_owned())],
            )
            .await?;
        if reply.status.is_success() {
            Ok(())
        } else {
            Err(reply.error(key))
        }
    }

    /// The ETag for `If-Match`. A version of another kind was never issued by this store and
    /// can never match, so the condition fails as a stale version's would: a conflict, or
    /// not found when there is no entity, which only a read can tell.
    async fn if_match(
        &self,
        partition_key: &str,
        row_key: &str,
        version: &Version,
        key: &RecordKey,
    ) -> Result<String, StoreError> {
        if let Some(tag) = version.as_tag() {
            return Ok(tag.to_owned());
        }
        let key = key.clone();
        Err(match self.get(partition_key, row_key, &key).await? {
            Some(_) => StoreError::Conflict { key },
            None => StoreError::NotFound { key },
        })
    }

    /// One entity, or `None` if it does not exist.
    pub(crate) async fn get(
        &self,
        partition_key: &str,
        row_key: &str,
        key: &RecordKey,
    ) -> Result<Option<Entity>, StoreError> {
        let url = self.entity_url(partition_key, row_key);
        let reply = self.send(Method::GET, url, None, &[]).await?;
        match reply.status {
            StatusCode::OK => {}
            StatusCode::NOT_FOUND => return Ok(None),
            _ => return Err(reply.error(key)),
        }
        let value: Value =
            serde_json::from_slice(&reply.body).map_err(|error| corrupt(key, &error))?;
        let Value::Object(properties) = value else {
            return Err(corrupt(key, &"the entity is not a JSON object"));
        };
        entity(properties, reply.etag(), key).map(Some)
    }

    /// Every entity of `partition_key` whose RowKey starts with `row_prefix`, in RowKey order.
    pub(crate) async fn query(
        &self,
        partition_key: &str,
        row_prefix: &str,
        what: &str,
    ) -> Result<Vec<Entity>, StoreError> {
        // Every RowKey that starts with the prefix sorts at or after it and before the prefix
        // with its last character incremented ('-' + 1 = '.').
        let mut upper = row_prefix.to_owned();
        let last = upper.pop().expect("row prefixes are not empty");
        upper.push(char::from_u32(last as u32 + 1).expect("ASCII prefix"));
        let filter = format!(
            "PartitionKey eq '{}' and RowKey ge '{}' and RowKey lt '{}'",
            quote(partition_key),
            quote(row_prefix),
            quote(&upper)
        );
        let listing = RecordKey::Stored(what.to_owned());
        let mut found = Vec::new();
        let mut next: Option<(String, String)> = None;
        for _ in 0..MAX_PAGES {
            let mut path = format!("{}()?$filter={}", self.table(), percent_encode(&filter));
            if let Some((partition, row)) = &next {
                path.push_str(&format!(
                    "&NextPartitionKey={}&NextRowKey={}",
                    percent_encode(partition),
                    percent_encode(row)
                ));
            }
            let reply = self.send(Method::GET, self.url(&path), None, &[]).await?;
            if reply.status != StatusCode::OK {
                return Err(reply.error(&listing));
            }
            let page: Value = serde_json::from_slice(&reply.body).map_err(|error| {
                StoreError::unavailable("Azure Table Storage sent an unreadable listing", error)
            })?;
            for item in page
                .get("value")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Value::Object(properties) = item {
                    let etag = properties
                        .get("odata.etag")
                        .and_then(Value::as_str)
                        .map(str::to_owned);
                    found.push(entity(properties.clone(), etag.as_deref(), &listing)?);
                }
            }
            next = match (
                reply.header("x-ms-continuation-NextPartitionKey"),
                reply.header("x-ms-continuation-NextRowKey"),
            ) {
                (Some(partition), Some(row)) => Some((partition.to_owned(), row.to_owned())),
                _ => return Ok(found),
            };
        }
        Err(StoreError::Invalid(format!(
            "listing {what} has more than {MAX_PAGES} pages"
        )))
    }
}

fn entity(
    properties: Map<String, Value>,
    etag: Option<&str>,
    key: &RecordKey,
) -> Result<Entity, StoreError> {
    let row_key = properties
        .get("RowKey")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| corrupt(key, &"the entity has no RowKey"))?;
    let etag = etag.map(str::to_owned).ok_or_else(|| missing_etag(key))?;
    Ok(Entity {
        row_key,
        properties,
        etag,
    })
}

fn missing_etag(key: &RecordKey) -> StoreError {
    StoreError::Unavailable {
        message: format!("Azure Table Storage sent no ETag for {key}"),
        source: None,
    }
}

fn corrupt(key: &RecordKey, reason: &dyn std::fmt::Display) -> StoreError {
    StoreError::Corrupt {
        key: key.clone(),
        reason: reason.to_string(),
    }
}

/// Percent-encodes everything but unreserved characters (RFC 3986), spaces as `%20`.
pub(crate) fn percent_encode(text: &str) -> String {
    let mut encoded = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            encoded.push(byte as char);
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_are_percent_encoded() {
        assert_eq!(
            percent_encode("PartitionKey eq 'a.b'"),
            "PartitionKey%20eq%20%27a.b%27"
        );
    }
}
