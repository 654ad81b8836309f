//! Setting a configuration up a field at a time: `with_*` methods that chain from
//! [`ParticipantConfig::new`] or [`ParticipantConfig::fast`], and a validating finish. The
//! configuration is `#[non_exhaustive]`, so that a new setting is never a breaking change:
//! outside this crate it is built this way, or by assigning its public fields.
//!
//! ```
//! use std::time::Duration;
//! use leasehold::{NodeId, ParticipantConfig};
//!
//! let config = ParticipantConfig::new(NodeId::new("server-1").unwrap(), 64)
//!     .with_heartbeat(Duration::from_secs(2))
//!     .with_store_timeout(Duration::from_secs(1))
//!     .with_lease_validity(Duration::from_secs(6))
//!     .with_acquire_after(Duration::from_secs(9))
//!     .validated()
//!     .unwrap();
//! assert_eq!(config.heartbeat, Duration::from_secs(2));
//!
//! // A validity shorter than two heartbeats is refused, naming both.
//! let refused = ParticipantConfig::new(NodeId::new("server-1").unwrap(), 64)
//!     .with_lease_validity(Duration::from_secs(12))
//!     .validated();
//! assert!(refused.unwrap_err().to_string().contains("12s"));
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use super::{ConfigError, ParticipantConfig};
use crate::types::{GroupName, NodeId, PartitionId};

/// One `with_*` method per public field, each documented by the field it sets.
macro_rules! with_fields {
    ($($method:ident => $field:ident: $ty:ty),* $(,)?) => {
        impl ParticipantConfig {
            $(
                #[doc = concat!("This configuration with [`ParticipantConfig::", stringify!($field), "`] set to `value`.")]
                #[must_use]
                pub fn $method(mut self, value: $ty) -> ParticipantConfig {
                    self.$field = value;
                    self
                }
            )*
        }
    };
}

with_fields! {
    with_node => node: NodeId,
    with_group => group: GroupName,
    with_partitions => partitions: u32,
    with_heartbeat => heartbeat: Duration,
    with_lease_validity => lease_validity: Duration,
    with_acquire_after => acquire_after: Duration,
    with_scan_interval => scan_interval: Duration,
    with_max_partitions_per_node => max_partitions_per_node: u32,
    with_max_acquires_per_scan => max_acquires_per_scan: u32,
    with_max_clock_drift => max_clock_drift: f64,
    with_store_timeout => store_timeout: Duration,
    with_weight => weight: u32,
    with_jitter => jitter: f64,
    with_forget_members_after => forget_members_after: Duration,
    with_relist_after => relist_after: Duration,
    with_drain_timeout => drain_timeout: Duration,
    with_advertise => advertise: Option<String>,
    with_metadata => metadata: BTreeMap<String, String>,
    with_capacity => capacity: Option<f64>,
    with_max_load => max_load: Option<f64>,
    with_load_band => load_band: f64,
    with_churn_budget => churn_budget: f64,
    with_churn_window => churn_window: Duration,
}

impl ParticipantConfig {
    /// This configuration with [`ParticipantConfig::excluded`] set to `partitions`.
    #[must_use]
    pub fn with_excluded(mut self, partitions: impl IntoIterator<Item = PartitionId>) -> Self {
        self.excluded = partitions.into_iter().collect();
        self
    }

    /// This configuration, if [`ParticipantConfig::validate`] accepts it.
    pub fn validated(self) -> Result<ParticipantConfig, ConfigError> {
        self.validate()?;
        Ok(self)
    }

    /// The simulator's negative controls, to turn one on (see [`NegativeControls`](super::NegativeControls)). A
    /// configuration with any on is refused by [`ParticipantConfig::validate`].
    #[cfg(feature = "negative-controls")]
    pub fn negative_controls_mut(&mut self) -> &mut super::NegativeControls {
        &mut self.controls
    }
}
