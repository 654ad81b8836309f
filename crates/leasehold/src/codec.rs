//! JSON encoding of records, for backends that store each record as one value
//! (etcd, ZooKeeper). Backends with columns (SQLite, PostgreSQL, Azure Tables) map fields
//! themselves.

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::StoreError;
use crate::types::RecordKey;

// Metadata is part of the member record; its encoding lives there, where its size limit is
// checked, and is offered here beside the records' own.
pub use crate::record::{decode_metadata, encode_metadata};

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
