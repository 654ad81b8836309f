//! JSON encoding of records, for backends that store each record as one value
//! (etcd, ZooKeeper). Backends with columns (SQLite, PostgreSQL, Azure Tables) map fields
//! themselves.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::StoreError;
use crate::record::RecordKey;

/// Encodes a record as compact JSON.
pub fn encode<T: Serialize>(record: &T) -> Vec<u8> {
    // Records hold only strings, numbers, booleans and lists of those: serializing cannot fail.
    serde_json::to_vec(record).expect("records always serialize")
}

/// Decodes a record written by [`encode`], naming `key` in the error if it cannot.
pub fn decode<T: DeserializeOwned>(
    key: impl Into<RecordKey>,
    bytes: &[u8],
) -> Result<T, StoreError> {
    serde_json::from_slice(bytes).map_err(|error| StoreError::Corrupt {
        key: key.into(),
        reason: error.to_string(),
    })
}

/// A member's metadata ([`crate::MemberRecord::metadata`]) as the compact JSON object that
/// stores with columns keep in one text column, and the form its size limit is measured in.
///
/// ```
/// use std::collections::BTreeMap;
/// use leasehold::codec::{decode_metadata, encode_metadata};
/// let metadata = BTreeMap::from([("zone".to_owned(), "eu-1".to_owned())]);
/// let json = encode_metadata(&metadata);
/// assert_eq!(json, r#"{"zone":"eu-1"}"#);
/// assert_eq!(decode_metadata(&json).unwrap(), metadata);
/// assert!(decode_metadata(r#"{"zone":1}"#).is_err());
/// ```
pub fn encode_metadata(metadata: &BTreeMap<String, String>) -> String {
    serde_json::to_string(metadata).expect("a map of strings always serializes")
}

/// Reads metadata written by [`encode_metadata`]; the error, for a
/// [`StoreError::Corrupt`], says why the text is not a JSON object of strings.
pub fn decode_metadata(json: &str) -> Result<BTreeMap<String, String>, String> {
    serde_json::from_str(json)
        .map_err(|error| format!("metadata is not a JSON object of strings: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{LeaseRecord, LeaseState};
    use crate::types::{Epoch, NodeId, PartitionId};

    #[test]
    fn records_round_trip_and_garbage_is_corrupt() {
        let record = LeaseRecord {
            owner: Some(NodeId::new("n1").unwrap()),
            epoch: Epoch(7),
            state: LeaseState::Held,
            ..LeaseRecord::default()
        };
        let bytes = encode(&record);
        assert_eq!(
            decode::<LeaseRecord>(PartitionId(3), &bytes).unwrap(),
            record
        );
        let error = decode::<LeaseRecord>(PartitionId(3), b"{not json").unwrap_err();
        assert!(
            matches!(error, StoreError::Corrupt { ref key, .. } if *key == RecordKey::Lease(PartitionId(3)))
        );
    }
}
